"""RazorAttention: retrieval heads keep their whole KV cache, the other heads only sink + recent window.

Source: Tang et al., "RazorAttention: Efficient KV Cache Compression Through Retrieval Heads"
(arXiv 2407.15891). Assumptions (docs/methods.md has the discussion):

- Static, decided once after prefill: a share f_l of the KV heads of layer l (echo and induction heads)
  keeps the full KV cache; every other KV head keeps the sink, the newest L_h = max(S0, ceil(N / C))
  tokens (Algorithm 1; S0 = budget - sink - 1; knobs `window_rule`, `compression_ratio`) and one
  compensation token that summarises the dropped ones: the runtime's own count
  (traces/kept_tokens.py `razor_bounded_tokens`), budget_tokens until N / C exceeds S0. Dropped tokens
  are gone.
- Where f_l comes from, in this order (`notes()` says which): `method_options.retrieval_fraction`, the
  same for every layer, when the user gives it; else, replaying a RazorAttention trace that records the
  runtime's retrieval-head probe (meta.extra["policy_probe"], sim.demand "probe"), the measured share of
  retrieval KV heads per layer (per target layer through the demand's layer map when transplanted onto
  another model); else 0.15 for every layer, the FreeKV paper's setup (its "sparsity 0.15").
- All on the GPU: no selection, no recall, no host memory, no link traffic.
- Per step and layer: one attention pass; retrieval heads attend the whole context, the others their
  bounded count. The attention kernel is memory bound, so its time follows the bytes read: per KV head
  of layer l on average f_l * context + (1 - f_l) * bounded tokens.
- Memory: exactly what is kept: f_l * context + (1 - f_l) * bounded tokens per KV head of layer l.

As published: RazorAttention has no public code; the FreeKV paper's re-implementation (rooikeee/FreeKV
accuracy/kvc/patch/llama.py `llama_dyn_attention_forward` 39-260, a DuoAttention-style split of the KV
heads into full and streaming ones inside a stock HF eager decoder) is what is priced: the HF decoder
(sim/methods/eager.py HF_*) with its attention replaced by head slicing (~6 views, 115-129), torch.cat of
the new K/V onto the full and the streaming caches (4 kernels, 176-196), sink/recent re-slicing and cat
(~2), two flash-attention calls (2, 219-254) and the output cat (1): ~9 kernel-launching ops.
"ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from sim.config import SimConfig
from sim.errors import SimInputError
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.head_split import HeadSplitMethod
from sim.methods.host_costs import HostOps
from traces.kept_tokens import razor_bounded_tokens

if TYPE_CHECKING:
    from sim.demand import Demand

__all__ = ["RazorAttention", "RAZOR_ATTENTION", "PAPER_FRACTION"]

PAPER_FRACTION = 0.15  # the FreeKV paper's RazorAttention setup ("sparsity 0.15")

# accuracy/kvc/patch/llama.py 115-254 (module docstring)
RAZOR_ATTENTION = HostOps(torch_ops=9, python_ops=6)


@dataclass(frozen=True)
class RazorAttention(HeadSplitMethod):
    """RazorAttention (module docstring). retrieval_fraction: share of KV heads that keep everything, in
    every layer (None: the trace's measured share when it records the probe, else PAPER_FRACTION).
    `measured_per_layer`, `measured_share` and `source` are set by `for_demand`, not by the user."""

    measured_per_layer: tuple[float, ...] | None = field(default=None, metadata={"option": False})
    measured_share: float | None = field(default=None, metadata={"option": False})
    source: str = field(default="", metadata={"option": False})

    needs_demand: ClassVar[bool] = False
    BOUNDED_EXTRA_TOKENS: ClassVar[int] = 1  # the compensation token (module docstring)
    own_demand_optional: ClassVar[bool] = True  # its own trace's probe replaces the paper's 0.15
    sources: ClassVar[tuple[str, ...]] = (
        "Tang et al., RazorAttention: Efficient KV Cache Compression Through Retrieval Heads "
        "(arXiv 2407.15891): full cache for echo/induction heads, sink + window + compensation token "
        "for the rest",
        "Liu et al., FreeKV (arXiv 2505.13109), evaluation setup: RazorAttention with sparsity 0.15",
        "freekv_runtime/policies/razorattention.py: the runtime's retrieval-head probe, recorded in its "
        "traces (traces/probe.py)",
    )

    def for_demand(self, demand: Demand | None, transplant: bool = False) -> RazorAttention:
        """Take the measured share of retrieval heads from a trace that records RazorAttention's probe,
        unless the user set retrieval_fraction (module docstring)."""
        if demand is None:
            return replace(self, source="no trace")
        share, per_layer = demand.retrieval_share, demand.retrieval_share_per_layer
        if share is None or per_layer is None:
            return replace(self, source="synthetic demand" if demand.synthetic
                           else "the trace records no retrieval-head probe")
        traced = demand.mapped_from or demand.model
        measured = f"the trace's retrieval-head probe measured {share:.1%} of {traced}'s KV heads"
        if self.knobs.retrieval_fraction is not None:
            return replace(self, measured_share=share, source=measured)
        mapped = f" (its layers mapped onto {demand.model}'s)" if demand.mapped_from else ""
        return replace(self, measured_per_layer=tuple(float(x) for x in per_layer), measured_share=share,
                       source=f"{measured}, used per layer{mapped}")

    def notes(self) -> tuple[str, ...]:
        if self.knobs.retrieval_fraction is not None:
            tail = f" ({self.source})" if self.measured_share is not None else ""
            return (f"razorattention retrieval_fraction {self.knobs.retrieval_fraction:g} from "
                    f"method_options{tail}",)
        if self.measured_per_layer is not None:
            return (f"razorattention retrieval heads: {self.source}",)
        return (f"razorattention retrieval_fraction {PAPER_FRACTION:g} (the FreeKV paper's setup): "
                f"{self.source or 'no trace'}",)

    def fractions(self, n_layers: int) -> np.ndarray:
        """(L,) float64 share of retrieval KV heads per layer (module docstring, in its order)."""
        if self.knobs.retrieval_fraction is not None:
            return np.full(n_layers, float(self.knobs.retrieval_fraction))
        if self.measured_per_layer is not None:
            if len(self.measured_per_layer) != n_layers:
                raise SimInputError(
                    f"razorattention: the trace's probe gives {len(self.measured_per_layer)} layers, the "
                    f"simulated model has {n_layers}; build the demand for the simulated model "
                    "(demand_from_trace(..., target_model=...))")
            return np.asarray(self.measured_per_layer, dtype=np.float64)
        return np.full(n_layers, PAPER_FRACTION)

    def bounded_tokens(self, context: np.ndarray | int, cfg: SimConfig) -> np.ndarray:
        """A non-retrieval head's tokens at `context`: the runtime's rule (traces/kept_tokens.py)."""
        k = self.knobs
        return np.asarray(razor_bounded_tokens(context, cfg.budget_tokens, cfg.sink_tokens, k.window_rule,
                                               k.compression_ratio, k.compensation != "none"),
                          dtype=np.float64)

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(RAZOR_ATTENTION)
