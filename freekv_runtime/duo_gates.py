"""DuoAttention's gate optimisation: which KV heads need the whole context, learnt on the model at hand.

Our own code following mit-han-lab/duo-attention (read at fe93c31):
- one gate alpha per (layer, KV head), a trainable parameter initialised to 1.0 (duo_attn/patch/llama.py
  478-489, utils.py 43 --initial_value 1.0); the model's weights are frozen (train.py 285-292);
- each gated head's attention output is alpha * full causal attention + (1 - alpha) * streaming attention,
  alpha clamped to [0, 1] in the mix and expanded from KV heads to their query heads (llama.py 120-129);
  the full-attention term is the reference model's output at that layer, without gradients (llama.py 57-58,
  60-103 compute it from the full half of the batch under no_grad and mix it into the gated half,
  127-129), the streaming term the gated model's own (with gradients, llama.py 74-118);
  streaming attention is causal attention restricted to the first `sink` tokens and the `recent` newest
  ones, the query's own token included (streaming_attn.py 15-24: recent_mask triu(-recent + 1));
- the reference is the same model with full attention everywhere, run without gradients (the code's
  "two-way" forward runs both halves of a doubled batch, llama.py 41-143); the loss is the squared
  difference of the final hidden states (after the final norm: the base model's output, train.py 283 and
  124), averaged over the hidden size and summed over the labelled positions / their number
  (train.py 136-146), + reg_weight * mean |alpha| (train.py 154-156, loss.py 1-4);
- AdamW(lr, weight_decay 0) (train.py 344), the LambdaLR schedule min(1, max((s+1)/(S//5), 0.1),
  max((S-s)/(S//5), 0.1)) (train.py 346-353), the gates clamped to [0, 1] in place before every step
  (train.py 98-102), one sample per step (scripts/train.sh 16 --batch_size 1, gradient_accumulation 1).
Differences (ours): a single process on CPU in float32 (the code: 8 GPUs, bf16, FSDP, sequence parallel);
the number of steps, the sequence lengths, sink/recent sizes and passkey counts are flags
(freekv_runtime.duo_train; the published values are its defaults' comments).

The forward is the runtime's own `ModelAdapter.forward` (freekv_runtime/model.py) with `GatedAttention` as
its `attend` callback: the decode path is untouched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.model import ModelAdapter
from freekv_runtime.timing import OpTimer

__all__ = ["GateTraining", "GatedAttention", "ReferenceAttention", "TrainedGates", "full_attention",
           "streaming_mask", "train_gates", "distill_loss", "lr_factor"]


def streaming_mask(n_tokens: int, sink: int, recent: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(T, T) bool: query i may attend key j when j <= i and (j < sink or j > i - recent)
    (duo_attn/patch/streaming_attn.py 15-24)."""
    i = torch.arange(n_tokens, device=device)[:, None]
    j = torch.arange(n_tokens, device=device)[None, :]
    return (j <= i) & ((j < sink) | (j > i - recent))


def full_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of the whole prompt: q (b, Hq, T, d), k/v (b, Hkv, T, d) -> (b, Hq, T, d); KV head h
    serves query heads h*group .. h*group+group-1 (enable_gqa)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class ReferenceAttention:
    """`attend` of the ungated model: full causal attention, each layer's output (b, Hq, T, d) kept."""

    def __init__(self) -> None:
        self.outputs: dict[int, torch.Tensor] = {}

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.outputs[layer] = full_attention(layer, q, k, v).detach()
        return self.outputs[layer]


class GatedAttention:
    """`attend(layer, q, k, v)` of the gated model: per KV head alpha * full + (1 - alpha) * streaming.

    alpha (L, Hkv) float32, the trainable gates; clamped to [0, 1] in the mix (llama.py 120-129). `full`,
    when given, holds each layer's full-attention output of the reference pass (the term the code mixes
    in); otherwise the full term is computed from this pass's q, k, v."""

    def __init__(self, alpha: torch.Tensor, sink: int, recent: int,
                 full: ReferenceAttention | None = None) -> None:
        self.alpha, self.sink, self.recent, self.full = alpha, sink, recent, full
        self._masks: dict[tuple[int, str], torch.Tensor] = {}

    def _mask(self, n_tokens: int, device: torch.device) -> torch.Tensor:
        key = (n_tokens, str(device))
        if key not in self._masks:
            self._masks[key] = streaming_mask(n_tokens, self.sink, self.recent, device)
        return self._masks[key]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, hq, t, d = q.shape
        group = hq // k.shape[1]
        full = self.full.outputs[layer] if self.full is not None else full_attention(layer, q, k, v)
        stream = F.scaled_dot_product_attention(q, k, v, attn_mask=self._mask(t, q.device), enable_gqa=True)
        a = self.alpha[layer].clamp(0, 1).repeat_interleave(group).to(q.dtype)[None, :, None, None]
        return a * full + (1 - a) * stream


def distill_loss(reference: torch.Tensor, gated: torch.Tensor, labelled: torch.Tensor) -> torch.Tensor:
    """reference, gated (b, T, D) final hidden states; labelled (b, T) bool -> scalar: the squared
    difference averaged over D, summed over labelled positions, divided by their number (train.py 136-146)."""
    diff = (reference[labelled].float() - gated[labelled].float()).pow(2).mean(dim=-1)
    return diff.sum() / labelled.sum().clamp(min=1)


def lr_factor(step: int, n_steps: int) -> float:
    """The learning-rate multiplier at `step` of `n_steps`: linear warm-up over the first fifth, flat,
    linear decay over the last fifth, never below 0.1 (train.py 346-353)."""
    fifth = max(1, n_steps // 5)
    return min(1.0, max((step + 1) / fifth, 0.1), max((n_steps - step) / fifth, 0.1))


@dataclass(frozen=True)
class GateTraining:
    """The optimisation's settings; the published values (scripts/train.sh 19-23, run_train.sh 1):
    steps 2000, lr 0.02, reg_weight 0.05, sink 128, recent 256; initial gates 1.0 (utils.py 43)."""

    steps: int = 2000
    lr: float = 0.02
    reg_weight: float = 0.05
    sink: int = 128
    recent: int = 256
    initial_value: float = 1.0


@dataclass
class TrainedGates:
    """alpha (L, Hkv) in [0, 1]; per-step distillation and regulariser losses and sample lengths; wall s."""

    alpha: np.ndarray
    distill: list[float] = field(default_factory=list)
    reg: list[float] = field(default_factory=list)
    sample_tokens: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    stopped_early: bool = False


def train_gates(
    adapter: ModelAdapter,
    samples: Iterator[tuple[torch.Tensor, torch.Tensor]],
    settings: GateTraining,
    log: Callable[[int, float, float, int], None] | None = None,
    max_wall_s: float = math.inf,
) -> TrainedGates:
    """Train the gates of `adapter`'s model on `samples`, an iterator of (token ids (1, T), labelled (1, T)
    bool). The model's parameters get requires_grad False; only alpha is optimised. `log(step, distill,
    reg, T)` after every step; training stops after `max_wall_s` seconds (recorded as stopped_early)."""
    shape = adapter.shape
    adapter.hf.requires_grad_(False)
    alpha = torch.nn.Parameter(torch.full((shape.n_layers, shape.n_kv_heads), settings.initial_value,
                                          dtype=torch.float32, device=adapter.device))
    optimizer = torch.optim.AdamW([alpha], lr=settings.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, settings.steps))
    reference_attention = ReferenceAttention()
    gated = GatedAttention(alpha, settings.sink, settings.recent, reference_attention)
    timer = OpTimer(torch.device("cpu"), enabled=False)
    out = TrainedGates(alpha=np.zeros(0))
    t0 = time.perf_counter()
    for step in range(settings.steps):
        with torch.no_grad():
            alpha.clamp_(0, 1)  # train.py 98-102
        tokens, labelled = next(samples)
        tokens, labelled = tokens.to(adapter.device), labelled.to(adapter.device)
        rope = adapter.rope_table(tokens.shape[1])
        with torch.no_grad():
            reference = adapter.forward(tokens, 0, rope, reference_attention, timer, hidden=True)
        hidden = adapter.forward(tokens, 0, rope, gated, timer, hidden=True)
        distill = distill_loss(reference, hidden, labelled)
        reg = alpha.abs().mean()  # loss.py 1-4 over every gate
        (distill + settings.reg_weight * reg).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        out.distill.append(distill.item())
        out.reg.append(reg.item())
        out.sample_tokens.append(int(tokens.shape[1]))
        if log is not None:
            log(step, out.distill[-1], out.reg[-1], out.sample_tokens[-1])
        if time.perf_counter() - t0 > max_wall_s and step + 1 < settings.steps:
            out.stopped_early = True
            break
    with torch.no_grad():
        alpha.clamp_(0, 1)
    out.alpha = alpha.detach().cpu().numpy().astype(np.float64)
    out.wall_s = time.perf_counter() - t0
    return out
