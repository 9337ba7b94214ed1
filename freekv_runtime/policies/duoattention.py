"""DuoAttention: retrieval heads keep the whole KV cache, streaming heads only sinks + recent tokens.

Xiao et al., "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming Heads" (ICLR
2025, arXiv 2410.10819); public code mit-han-lab/duo-attention (read at fe93c31), what this policy follows:
- the head split is per KV head (a (layers, KV heads) array of gate values alpha in [0, 1],
  attn_patterns/<model>/.../full_attention_heads.tsv, read by duo_attn/utils.py `load_attn_pattern`
  326-336: np.loadtxt, clipped to [0, 1]); `sparsify_attention_heads` (utils.py 353-373) makes the
  `sparsity` share of heads with the lowest alpha, over all layers at once (np.quantile), streaming heads
  and the rest retrieval ("full attention") heads;
- prefill is full causal attention for every head (duo_attn/patch/llama.py 227-235, also the static-cache
  path 364-371); at decode a retrieval head attends its whole cache and a streaming head its sink_size
  first + recent_size newest tokens (llama.py 273-290 truncate the streaming cache after each attention;
  static_kv_cache.py `compress_and_replace_streaming_kv` 127-165).

Here (freekv_runtime.policies._dropping): a streaming KV head keeps sink_tokens + the newest
budget_tokens - sink_tokens tokens (DuoAttention's sink_size + recent_size = budget_tokens, the budget
convention: the token just appended counts; window_tokens is not used beyond validation, as in
StreamingLLM); retrieval heads and dense layers attend everything (`unbudgeted_heads`).

Where the head split comes from (`prepare`, knob head_split):
- trained (default): DuoAttention's gate optimisation (duo_attn/train.py; ours: freekv_runtime.duo_gates,
  run by `python -m freekv_runtime.duo_train`): gates mixing full and streaming attention per KV head
  (llama.py 120-129) trained on synthetic multi-passkey retrieval with loss = MSE(final hidden states of the
  full model, of the gated model) + 0.05 * L1(alpha) (train.py 139-156). The gates come from `pattern` (a
  path: a released pattern for a model it was trained on, Llama-2-7B-32K, Llama-3-8B-1048k/4194k,
  Llama-3.1-8B, Mistral-7B v0.2/v0.3 in attn_patterns/, or one written by duo_train), else from the pattern
  shipped for this model (freekv_runtime/patterns/, matched by shape and weight fingerprint,
  freekv_runtime.policies._duo_patterns; smollm2-135m has one); a model with neither is refused with how
  to train one. The shape must be the model's (layers, KV heads); sparsified with `sparsity` as utils.py
  does (ties to the lower index instead of its 1e-6 random noise);
- probe: a PROXY of the optimisation (labelled so in the trace), chosen explicitly (random-weight models,
  models without a trained pattern). It measures, on a probe of a seeded random segment of
  P = max(probe_tokens, budget_tokens) tokens repeated `probe_repeats` times (each repeat can only be
  predicted by retrieving the previous one, P tokens back, beyond a streaming head's recent window), each
  KV head's relative deviation sum ||o_full - o_stream||^2 / sum ||o_full||^2 of its attention output (its
  query heads, the queries of the repeats after the first) when it streams (the same sink + recent mask as
  at decode) while every other head attends fully: the first-order, per-head form of the distillation term
  at alpha in {0, 1} without the training. Heads with the lowest deviation stream (the `sparsity` share
  over all layers, as `sparsify_attention_heads`).
The split is published in the trace's metadata (traces.probe.retrieval_probe, plus "head_split": "trained
gates (DuoAttention optimisation)", "pattern" (a given file) or "deviation-probe (proxy ...)", and the
gates' file as "head_split_source"), and the simulator's model replays its measured share per layer.

Configuration: RuntimeConfig budget_tokens, sink_tokens, dense_layers; `config.knobs`
(traces.catalogue.dropping.DuoAttentionKnobs): sparsity (0.5, scripts/run_longbench.sh 4 evaluates 0, 0.5
and 0.75), head_split (trained), pattern, probe_tokens (256), probe_repeats (2), probe_seed (0).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies._dropping import DroppingState
from freekv_runtime.policies._duo_patterns import shipped_names, shipped_pattern
from freekv_runtime.policies.base import AttentionShape, KVPolicy, ModelAccess, PrefillOnlyState
from freekv_runtime.policies.razorattention import probe_tokens
from freekv_runtime.timing import OpTimer
from traces.probe import retrieval_probe

__all__ = ["DuoAttentionPolicy", "DuoAttentionState", "DeviationProbeState", "split_heads", "load_pattern"]

log = logging.getLogger(__name__)

_QUERY_CHUNK = 256  # probe queries per block: bounds the probe's memory to (b, Hq, chunk, T)


def split_heads(scores: np.ndarray, sparsity: float) -> np.ndarray:
    """(L, Hkv) bool retrieval heads: the `sparsity` share of heads with the lowest score (over all
    layers) stream, the rest retrieve (duo_attn/utils.py 353-373; ties to the lower flat index)."""
    n_stream = int(round(sparsity * scores.size))
    retrieval = np.ones(scores.size, dtype=bool)
    retrieval[np.argsort(scores.ravel(), kind="stable")[:n_stream]] = False
    return retrieval.reshape(scores.shape)


def load_pattern(path: str, n_layers: int, n_kv_heads: int) -> np.ndarray:
    """(L, Hkv) float gate values of a released full_attention_heads.tsv, clipped to [0, 1]
    (duo_attn/utils.py 326-332); RuntimeConfigError naming the knob when unreadable or of another shape."""
    file = Path(path)
    if file.is_dir():
        file = file / "full_attention_heads.tsv"
    try:
        alpha = np.atleast_2d(np.loadtxt(file, dtype=float, delimiter="\t"))
    except (OSError, ValueError) as exc:
        raise RuntimeConfigError(
            f"duoattention knob pattern={path!r}: cannot read a DuoAttention pattern (a tab-separated "
            f"full_attention_heads.tsv of layers x KV heads gate values, or its directory): {exc}") from None
    if alpha.shape != (n_layers, n_kv_heads):
        raise RuntimeConfigError(
            f"duoattention knob pattern={path!r}: the pattern is {alpha.shape[0]} x {alpha.shape[1]} "
            f"(layers x KV heads), the model has {n_layers} x {n_kv_heads}; use the pattern released for "
            "this model")
    return np.clip(alpha, 0.0, 1.0)


class DeviationProbeState(PrefillOnlyState):
    """Exact causal attention over the probe; measures per layer and KV head the relative squared deviation
    of its output when it streams (sink + recent mask), over the queries i >= `period` (module docstring)."""

    def __init__(self, n_layers: int, n_kv_heads: int, period: int, sink: int, recent: int) -> None:
        self.period, self.sink, self.recent = period, sink, recent
        self.deviation = np.zeros((n_layers, n_kv_heads), dtype=np.float64)

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, hq, t, d = q.shape
        hkv = k.shape[1]
        kf, vf = k.float(), v.float()
        out = torch.empty(b, hkv, hq // hkv, t, d, dtype=torch.float32, device=q.device)
        diff = torch.zeros(hkv, dtype=torch.float64, device=q.device)
        norm = torch.zeros_like(diff)
        cols = torch.arange(t, device=q.device)
        for start in range(0, t, _QUERY_CHUNK):
            stop = min(t, start + _QUERY_CHUNK)
            rows = torch.arange(start, stop, device=q.device)[:, None]
            qg = q[:, :, start:stop].float().reshape(b, hkv, hq // hkv, stop - start, d)
            scores = qg @ kf[:, :, None].transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, n, T)
            full = scores.masked_fill(cols[None, :] > rows, float("-inf"))
            local = (cols[None, :] < self.sink) | (cols[None, :] > rows - self.recent)
            stream = full.masked_fill(~local, float("-inf"))
            o_full = torch.softmax(full, dim=-1) @ vf[:, :, None]
            o_stream = torch.softmax(stream, dim=-1) @ vf[:, :, None]
            out[:, :, :, start:stop] = o_full
            measured = (rows[:, 0] >= self.period)[None, None, None, :, None]
            diff += ((o_full - o_stream) ** 2 * measured).sum(dim=(0, 2, 3, 4)).double()
            norm += (o_full**2 * measured).sum(dim=(0, 2, 3, 4)).double()
        self.deviation[layer] = (diff / norm.clamp(min=1e-30)).cpu().numpy()
        return out.reshape(b, hq, t, d).to(q.dtype)


class DuoAttentionState(DroppingState):
    """retrieval (L, Hkv) bool: heads that keep everything; the others keep sink + recent."""

    def __init__(self, *args, retrieval: np.ndarray, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.retrieval = torch.as_tensor(retrieval, device=self.device)

    @property
    def unbudgeted_heads(self) -> np.ndarray:
        """(L, Hkv) bool: the retrieval heads of sparse layers (they attend the whole context)."""
        sparse = np.array([not self.is_dense(layer) for layer in range(self.shape.n_layers)])
        return self.retrieval.cpu().numpy() & sparse[:, None]

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        pos = torch.arange(n_tokens, device=keep.device)
        recent = self.config.budget_tokens - self.config.sink_tokens
        local = (pos < self.config.sink_tokens) | (pos >= n_tokens - recent)  # (N,)
        return keep & (self.retrieval[layer][None, :, None] | local)


class DuoAttentionPolicy(KVPolicy):
    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.knobs = config.knobs
        self.retrieval_heads: np.ndarray | None = None  # (L, Hkv) bool, set by `prepare`
        self.head_scores: np.ndarray | None = None  # (L, Hkv): gate values or probe deviations
        self.head_split = ""
        self.pattern_source = ""  # the gates' file for head_split trained

    def prepare(self, model: ModelAccess) -> None:
        """The head split: trained gates (the pattern knob, else the pattern shipped for the model) or, when
        head_split is probe, the deviation probe (module docstring)."""
        k, shape = self.knobs, model.shape
        if k.head_split == "probe":
            if k.pattern is not None:
                raise RuntimeConfigError(
                    f"duoattention knobs head_split=probe and pattern={k.pattern!r} contradict each other: a "
                    "pattern holds trained gates (head_split trained); drop one of them")
            self.head_scores = self._probe(model)
            self.head_split = "deviation-probe (proxy of DuoAttention's optimisation)"
        elif k.pattern is not None:
            self.head_scores = load_pattern(k.pattern, shape.n_layers, shape.n_kv_heads)
            self.head_split = "pattern"
            self.pattern_source = str(k.pattern)
        else:
            found = shipped_pattern(model)
            if found is None:
                shipped = ", ".join(shipped_names()) or "none"
                raise RuntimeConfigError(
                    f"duoattention (head_split trained) has no trained head split for this model "
                    f"({shape.n_layers} layers x {shape.n_kv_heads} KV heads; patterns are shipped for: "
                    f"{shipped}). Train one with `python -m freekv_runtime.duo_train --model MODEL --out "
                    "DIR` and pass --option pattern=DIR, give a released DuoAttention pattern with --option "
                    "pattern=PATH, or choose the deviation probe (a proxy) with --option head_split=probe")
            self.head_scores = load_pattern(str(found), shape.n_layers, shape.n_kv_heads)
            self.head_split = "trained gates (DuoAttention optimisation)"
            self.pattern_source = f"freekv_runtime/patterns/{found.name}"
        self.retrieval_heads = split_heads(self.head_scores, k.sparsity)
        log.info("duoattention (%s): %d of %d KV heads are retrieval heads", self.head_split,
                 int(self.retrieval_heads.sum()), self.retrieval_heads.size)

    def _probe(self, model: ModelAccess) -> np.ndarray:
        """(L, Hkv) relative deviations of each KV head streaming on the probe (DeviationProbeState)."""
        k, shape = self.knobs, model.shape
        period = self.probe_period()
        tokens = probe_tokens(model.vocab_size, period, k.probe_repeats, k.probe_seed)
        probe = DeviationProbeState(shape.n_layers, shape.n_kv_heads, period, self.config.sink_tokens,
                                    self.config.budget_tokens - self.config.sink_tokens)
        with torch.no_grad():
            model.run_prefill(tokens.to(model.device), probe)
        return probe.deviation

    def probe_period(self) -> int:
        """The probe's segment length: probe_tokens, at least budget_tokens so that a repeat's lookup
        (period tokens back) lies beyond a streaming head's recent window."""
        return max(self.knobs.probe_tokens, self.config.budget_tokens)

    def prepared_metadata(self) -> dict[str, Any]:
        """The head split for the trace metadata (traces.probe.retrieval_probe + its source); {} before
        `prepare`."""
        if self.retrieval_heads is None:
            return {}
        probe = self.probe_period() * self.knobs.probe_repeats if self.knobs.head_split == "probe" else 0
        meta = {**retrieval_probe(self.retrieval_heads, probe), "head_split": self.head_split}
        return {**meta, "head_split_source": self.pattern_source} if self.pattern_source else meta

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> DuoAttentionState:
        heads = self.retrieval_heads
        if heads is None or heads.shape != (shape.n_layers, shape.n_kv_heads):
            raise RuntimeConfigError(
                f"duoattention needs its head split: call prepare(model) with the model of shape {shape} "
                f"before new_state (prepared: {None if heads is None else heads.shape})")
        return DuoAttentionState(self.config, shape, batch_size, torch.device(device), dtype, timer,
                                 retrieval=heads)
