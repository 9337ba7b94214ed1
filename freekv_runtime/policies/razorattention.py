"""RazorAttention: retrieval heads keep the whole KV; every other head keeps sink + window + one
compensation token standing for everything it dropped.

Tang et al., "RazorAttention: Efficient KV Cache Compression Through Retrieval Heads" (ICLR 2025, arXiv
2407.15891). No official code is public (searched); read for semantics: the paper's description (Sec. 3,
Algorithm 1: non-retrieval heads keep the first N0 sink tokens and the recent L_h tokens, the rest is
compressed into one compensation token {k_hat, v_hat}, the mean of the dropped keys and values;
retrieval heads = echo heads (attend the previous occurrence of the current token) + induction heads
(attend the token after it), found with repeated random tokens, ~1% echo + ~14% induction heads), and
NVIDIA/kvpress kvpress/presses/duo_attention_press.py (the same head split for DuoAttention: a KV-head
mask of "streaming" heads that keep sink + recent, retrieval heads keep all).

Probe (`prepare(model)`, once per policy): a random token segment of `probe_tokens` tokens (seed
`probe_seed`; distinct tokens when the vocabulary allows) repeated `probe_repeats` times runs through the
model (`ModelAccess.run_prefill`) with `ProbeState`, exact causal attention that also measures, per layer
and query head, over the queries i of the repeats after the first (period P = probe_tokens):
  echo score      = mean attention probability on key i - P     (the previous occurrence of token i),
  induction score = mean attention probability on key i - P + 1 (the token that followed it).
The ceil(induction_fraction * L * Hq) heads of highest induction score and the ceil(echo_fraction * L *
Hq) of highest echo score (ranked over all layers and heads, as the paper does; ties to the lower index)
are retrieval heads. GQA (knob `gqa_heads`; the paper's models are MHA and it does not say): "kv" (the
default) scores a KV head by the best query head of its group and takes the fractions of all KV heads, so
~15% of KV heads keep their whole cache, the share the paper reports; "any_query" takes the fractions of
all query heads and marks a KV head if any query head of its group is one (26% of KV heads on
smollm2-135m, 23 of 90: G = 3 times the chances). The result is
deterministic (seeded), kept on the policy (`retrieval_heads`, `induction_scores`, `echo_scores`), logged
(logger of this module) and published by `prepared_metadata` (traces.probe.retrieval_probe: the retrieval
KV heads per layer and their share), which `run_trace` records in the trace as
`meta.extra["policy_probe"]`; the simulator's RazorAttention model replays that measured share.

Decode of a sparse layer (see freekv_runtime.policies._dropping): prefill is dense; when the context
exceeds budget_tokens, a non-retrieval KV head holding N tokens keeps the sink [0, S) (the paper's N0) and
the newest L_h = max(S0, ceil(N / C)) tokens (Algorithm 1 line 2; knob `window_rule` "paper"), S0 =
budget_tokens - sink_tokens - 1 (the paper's compression threshold: so a head attends at least the
budget), C = `compression_ratio`; `window_rule` "budget" keeps L_h = S0 (a fixed window). Every token
it drops is folded into its compensation token (running sums of keys and values, float32; the token is
their mean), so it attends S + L_h + 1 tokens (`attend_limit`), budget_tokens until N / C exceeds S0.
Retrieval heads attend the whole context: they are exempt from the budget by definition
(`RazorAttentionState.unbudgeted_heads`, read by the conformance suite). Dense layers attend everything.
Trace: evicted_tokens = tokens a head dropped at this step (the first decode step drops the prompt's
middle, then one per step), nothing fetched; attended_tokens counts the compensation token.

Compensation token in the softmax (`compensation`): "count" (default) weights it as the dropped tokens it
stands for, logit q.k_hat/sqrt(d) + log(n_dropped) (our reading of the paper's attention with the
compensation token: each dropped token approximated by k_hat, v_hat); "single" attends it as one plain
token; "none" drops it (plain sink + window: the ablation without compensation).

Configuration: RuntimeConfig budget_tokens (FreeKV baseline 2048), sink_tokens (the paper's N0 sink
tokens), dense_layers (FreeKV baseline: layer 0); window_tokens, page_size (baseline 32), tau,
group_pooling, page_summary unused (token granularity; the whole non-sink budget is the window, as in
StreamingLLM). `config.knobs` (traces.catalogue.dropping.RazorAttentionKnobs) and defaults:
- induction_fraction (0.14): fraction of all query heads taken as induction heads, in [0, 1];
- echo_fraction (0.01): fraction taken as echo heads, in [0, 1];
- probe_tokens (256): the random segment's length P, int >= 2 (estimate: long enough that the repeats'
  attention is measured over hundreds of queries; the paper's length is not used);
- probe_repeats (4): times the segment appears, int >= 2 (the probe is P * repeats tokens);
- probe_seed (0): seed of the probe tokens, int >= 0;
- compensation ("count"): "count", "single" or "none" (above);
- gqa_heads ("kv"): "kv" or "any_query" (above);
- window_rule ("paper"): "paper" max(S0, ceil(N/C)) or "budget" (S0 alone);
- compression_ratio (5.0): C, float >= 1 (estimate: the paper gives no value in the text read; 15% whole
  heads plus 85% at N/5 keep ~32% of the cache, the paper's "over 70%" reduction).
Differences from the paper (docs/methods.md): S0 is set by the budget (budget - sink - 1) and C is an
estimate; compression happens at the first decode step (the prefill attends densely, as every dropping policy
here); keys are post-RoPE as in the paper's Algorithm 1.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies._dropping import DroppingState, masked_decode
from freekv_runtime.policies.base import (
    AttentionShape,
    KVPolicy,
    ModelAccess,
    PrefillOnlyState,
)
from freekv_runtime.timing import OpTimer
from traces.kept_tokens import razor_s0, razor_window_tokens
from traces.probe import retrieval_probe

__all__ = ["RazorAttentionPolicy", "RazorAttentionState", "ProbeState", "retrieval_kv_heads"]

log = logging.getLogger(__name__)


_QUERY_CHUNK = 256  # probe queries per block: bounds the probe's memory to (b, Hq, chunk, T)


class ProbeState(PrefillOnlyState):
    """Exact causal attention over a probe prompt that repeats a segment of `period` tokens; measures
    per layer and query head the mean attention probability on key i - period (echo) and on key
    i - period + 1 (induction) over the queries i >= period. Only `prefill` is used (through
    `ModelAccess.run_prefill`); a probe has no decode."""

    def __init__(self, n_layers: int, n_qo_heads: int, period: int) -> None:
        self.period = period
        self.echo = np.zeros((n_layers, n_qo_heads), dtype=np.float64)
        self.induction = np.zeros((n_layers, n_qo_heads), dtype=np.float64)

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, hq, t, d = q.shape
        hkv, p = k.shape[1], self.period
        kf, vf = k.float(), v.float()
        out = torch.empty(b, hkv, hq // hkv, t, d, dtype=torch.float32, device=q.device)
        echo = torch.zeros(hkv, hq // hkv, dtype=torch.float64, device=q.device)
        induction = torch.zeros_like(echo)
        for start in range(0, t, _QUERY_CHUNK):
            stop = min(t, start + _QUERY_CHUNK)
            qg = q[:, :, start:stop].float().reshape(b, hkv, hq // hkv, stop - start, d)
            scores = qg @ kf[:, :, None].transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, n, T)
            rows = torch.arange(start, stop, device=q.device)
            future = torch.arange(t, device=q.device)[None, :] > rows[:, None]  # (n, T)
            scores = scores.masked_fill(future, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[:, :, :, start:stop] = probs @ vf[:, :, None]
            repeated = rows >= p
            if repeated.any():
                i = rows[repeated]
                sub = probs[:, :, :, repeated]  # (b, Hkv, G, m, T)
                at = torch.arange(len(i), device=q.device)
                echo += sub[..., at, i - p].sum(dim=(0, 3)).double()
                induction += sub[..., at, i - p + 1].sum(dim=(0, 3)).double()
        n_queries = b * max(t - p, 1)
        self.echo[layer] = (echo / n_queries).reshape(hq).cpu().numpy()
        self.induction[layer] = (induction / n_queries).reshape(hq).cpu().numpy()
        return out.reshape(b, hq, t, d).to(q.dtype)



def _top(scores: np.ndarray, fraction: float) -> np.ndarray:
    """Bool mask of the ceil(fraction * size) highest scores (ties: the lower flat index)."""
    n = math.ceil(fraction * scores.size - 1e-9)
    mask = np.zeros(scores.size, dtype=bool)
    mask[np.argsort(-scores.ravel(), kind="stable")[:n]] = True
    return mask.reshape(scores.shape)


def retrieval_kv_heads(induction: np.ndarray, echo: np.ndarray, induction_fraction: float,
                       echo_fraction: float, n_kv_heads: int, gqa: str = "kv") -> np.ndarray:
    """(L, Hkv) bool retrieval KV heads from per-query-head scores (L, Hq).

    gqa "kv" (the default): a KV head's score is the best of its group's query heads, and the top
    induction and echo fractions of all KV heads are retrieval heads, so the share of KV heads kept whole
    is the paper's ~15% (its models are MHA, where query head = KV head). gqa "any_query": the top
    fractions of all query heads, and a KV head retrieves if any of its group's query heads does (under
    GQA that marks up to G times the share: 23 of 90 KV heads, 26%, on smollm2-135m)."""
    n_layers, hq = induction.shape
    if gqa == "any_query":
        query_heads = _top(induction, induction_fraction) | _top(echo, echo_fraction)
        return query_heads.reshape(n_layers, n_kv_heads, hq // n_kv_heads).any(axis=2)
    group = hq // n_kv_heads
    kv_induction = induction.reshape(n_layers, n_kv_heads, group).max(axis=2)
    kv_echo = echo.reshape(n_layers, n_kv_heads, group).max(axis=2)
    return _top(kv_induction, induction_fraction) | _top(kv_echo, echo_fraction)


def probe_tokens(vocab_size: int, period: int, repeats: int, seed: int) -> torch.Tensor:
    """(1, period * repeats) int64: a seeded random segment (distinct tokens when the vocabulary has
    enough) repeated."""
    g = torch.Generator().manual_seed(seed)
    if period <= vocab_size:
        segment = torch.randperm(vocab_size, generator=g)[:period]
    else:
        segment = torch.randint(0, vocab_size, (period,), generator=g)
    return segment.repeat(repeats)[None]


class RazorAttentionState(DroppingState):
    """retrieval (Hkv,) bool per layer; comp_k / comp_v[l] (b, Hkv, d) float32 sums of the dropped keys
    and values, n_dropped[l] (b, Hkv) float32 how many (the compensation token is sum / count)."""

    def __init__(self, *args, retrieval: np.ndarray, compensation: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.retrieval = torch.as_tensor(retrieval, device=self.device)  # (L, Hkv) bool
        self.compensation = compensation
        knobs = self.config.knobs
        self.window_rule, self.compression_ratio = knobs.window_rule, knobs.compression_ratio
        # S0, the paper's compression threshold (the shortest buffer): the budget's room after the sink
        # and the compensation token, so a head compresses once the context exceeds budget_tokens
        self.s0 = razor_s0(self.config.budget_tokens, self.config.sink_tokens)
        b, h, d = self.b, self.shape.n_kv_heads, self.shape.head_dim
        zeros = [torch.zeros(b, h, d, dtype=torch.float32, device=self.device) for _ in range(2)]
        self.comp_k = [zeros[0].clone() for _ in range(self.shape.n_layers)]
        self.comp_v = [zeros[1].clone() for _ in range(self.shape.n_layers)]
        self.n_dropped = [torch.zeros(b, h, dtype=torch.float32, device=self.device)
                          for _ in range(self.shape.n_layers)]

    def window_tokens(self, n_tokens: int) -> int:
        """L_h: recent tokens a non-retrieval head keeps when it holds n_tokens. Paper (Algorithm 1 line 2):
        max(S0, ceil(N / C)); "budget": S0 alone (budget - sink - 1 by default)."""
        c = self.config
        return razor_window_tokens(n_tokens, c.budget_tokens, c.sink_tokens, self.window_rule,
                                   self.compression_ratio)

    def attend_limit(self, n_tokens: int) -> int:
        """The most tokens a non-retrieval head attends at n_tokens: sink + L_h + the compensation token
        (above budget_tokens once N / C exceeds S0: the paper's buffer grows with the context)."""
        return min(n_tokens + 1, self.config.sink_tokens + self.window_tokens(n_tokens) + 1)

    @property
    def unbudgeted_heads(self) -> np.ndarray:
        """(L, Hkv) bool: the retrieval heads of sparse layers, which attend the whole context by
        definition (exempt from budget_tokens; see tests/freekv_runtime/test_policy_conformance.py)."""
        sparse = np.array([not self.is_dense(layer) for layer in range(self.shape.n_layers)])
        return self.retrieval.cpu().numpy() & sparse[:, None]

    def compensation_token(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(k_hat, v_hat (b, Hkv, d) the means of the dropped keys and values, n_dropped (b, Hkv))."""
        n = self.n_dropped[layer]
        div = n.clamp(min=1.0)[..., None]
        return self.comp_k[layer] / div, self.comp_v[layer] / div, n

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        pos = torch.arange(n_tokens, device=keep.device)
        local = (pos < self.config.sink_tokens) | (pos >= n_tokens - self.window_tokens(n_tokens))  # (N,)
        new_keep = keep & (self.retrieval[layer][None, :, None] | local)
        dropped = (keep & ~new_keep).float()  # (b, Hkv, N)
        keys = self.cache.keys[layer][:, :, :n_tokens].float()
        values = self.cache.values[layer][:, :, :n_tokens].float()
        self.comp_k[layer] += (dropped[..., None] * keys).sum(2)
        self.comp_v[layer] += (dropped[..., None] * values).sum(2)
        self.n_dropped[layer] += dropped.sum(-1)
        return new_keep

    def _attend(self, layer: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k_hat, v_hat, n = self.compensation_token(layer)
        if self.compensation == "none" or not bool((n > 0).any()):
            out, probs = masked_decode(q, keys, values, keep)
            return out, probs, keep.sum(-1)
        present = n > 0
        bias = torch.where(present, n.clamp(min=1.0).log() if self.compensation == "count"
                           else torch.zeros_like(n), torch.full_like(n, float("-inf")))
        out, probs = masked_decode(q, keys, values, keep, extra=(k_hat, v_hat, bias))
        return out, probs, keep.sum(-1) + present.long()


class RazorAttentionPolicy(KVPolicy):
    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.knobs = config.knobs
        self.retrieval_heads: np.ndarray | None = None  # (L, Hkv) bool, set by `prepare`
        self.induction_scores: np.ndarray | None = None  # (L, Hq)
        self.echo_scores: np.ndarray | None = None

    def prepare(self, model: ModelAccess) -> None:
        """Run the retrieval-head probe on `model` (see the module docstring)."""
        k = self.knobs
        shape = model.shape
        period = k.probe_tokens
        tokens = probe_tokens(model.vocab_size, period, k.probe_repeats, k.probe_seed)
        probe = ProbeState(shape.n_layers, shape.n_qo_heads, period)
        with torch.no_grad():
            model.run_prefill(tokens.to(model.device), probe)
        self.induction_scores, self.echo_scores = probe.induction, probe.echo
        self.retrieval_heads = retrieval_kv_heads(probe.induction, probe.echo, k.induction_fraction,
                                                  k.echo_fraction, shape.n_kv_heads, k.gqa_heads)
        log.info("razorattention probe: %d of %d KV heads are retrieval heads: %s",
                 int(self.retrieval_heads.sum()), self.retrieval_heads.size,
                 [tuple(int(x) for x in lh) for lh in np.argwhere(self.retrieval_heads)])

    def prepared_metadata(self) -> dict[str, Any]:
        """The probe's result for the trace metadata (traces.probe.retrieval_probe); {} before `prepare`."""
        if self.retrieval_heads is None:
            return {}
        return retrieval_probe(self.retrieval_heads,
                               self.knobs.probe_tokens * self.knobs.probe_repeats)

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> RazorAttentionState:
        heads = self.retrieval_heads
        if heads is None or heads.shape != (shape.n_layers, shape.n_kv_heads):
            raise RuntimeConfigError(
                f"razorattention needs its retrieval-head probe: call prepare(model) with the model of shape "
                f"{shape} before new_state (prepared: {None if heads is None else heads.shape})"
            )
        return RazorAttentionState(self.config, shape, batch_size, torch.device(device), dtype, timer,
                                   retrieval=heads, compensation=self.knobs.compensation)
