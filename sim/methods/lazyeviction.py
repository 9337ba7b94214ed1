"""LazyEviction: a GPU cache evicted every W decode steps, tokens ranked by their attention's recurrence.

Source: Zhang et al., "LazyEviction: Lagged KV Eviction with Attention Pattern Observation for Efficient
Long Reasoning" (arXiv 2506.15969) and its code (Halo-949/LazyEviction, read at its copy in
WeianMao/triattention e7a0eb1, LazyEviction/). Assumptions:

- All on the GPU, no host memory, no link traffic. A head attends, at each step, the tokens of
  traces/lazy_schedule.py `lazy_attended_tokens` (the runtime policy freekv_runtime/policies/
  lazyeviction.py attends exactly these; tested): the whole prompt until the first eviction, then
  max_kv_capacity + 1 .. max_kv_capacity + W (W = window_tokens; `budget_rule` peak: max_kv_capacity =
  budget - W, so at most the budget after step 1; published: max_kv_capacity = budget). Dense layers
  attend the context. Memory: the most tokens a head holds over the run, plus its recurrence state
  (last step and MRI, 4 bytes each per token).
- `selection` per-query-head (the code's: K/V repeated to every query head before caching,
  model/llama_model.py:64-65): one kept set per query head, G times the KV of a GQA group; per-kv-head
  one per KV head.
- Every step and sparse layer, "record" (model/temp_cacheobs.py:26-47): the step's probabilities compared
  with alpha and the last-step and MRI arrays updated. As published: the two arrays grown by torch.cat
  (a copy each), cloned, compared, index-put, subtracted, maximum: 7 kernels over (b, sets, N), plus the
  explicit q.K^T and fp32 softmax of update_kv_in_decoding (model/kv_utils.py:59-60) that the eager Llama
  forward reuses as its attention (llama_model.py:87-101, eval_llama.sh attn_implementation eager).
  Ideal: the attention writes its probabilities and one pass updates both arrays.
- Every W-th step once a head holds more than max_kv_capacity (and after step 1 when the peak rule
  evicts early), "evict" (kv_utils.py:72-98): the importance (about 10 elementwise kernels), top-k, the
  state gathered and concatenated (4 + 2 kernels), and K and V gathered and concatenated (4 kernels),
  which copies the whole kept cache. Ideal: one pass scoring and selecting, the kept slots left in place
  (new tokens overwrite evicted slots).

As published: a stock HF Llama decoder in eager mode with the code's attention forward (repeat_kv,
matmul, scale, fp32 softmax, cast, matmul: priced by sim/methods/dropping.py `eager_attention_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed, OpSpec, Work
from sim.methods.decoder_layer import GroupOptionMethod, OwnOps, layer_attention_s, layer_split
from sim.methods.dropping import eager_attention_s, own_kernels
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.lazy_schedule import lazy_attended_tokens, lazy_capacity
from traces.models import ModelSpec

__all__ = ["LazyEviction"]

# llama_model.py:26-118: projections/RoPE as HF, repeat_kv (2), cache update, update_kv_in_decoding's
# matmul, div, softmax, cast (kv_utils.py:59-60), dropout, matmul
LAZY_ATTENTION = HostOps(torch_ops=2 + 4 + 2, python_ops=10)
LAZY_RECORD = HostOps(torch_ops=9, python_ops=6)  # temp_cacheobs.py:26-47 (ones, zeros, 2 cats, clone, ...)
LAZY_EVICT = HostOps(torch_ops=22, python_ops=10)  # kv_utils.py:72-98
_SCORE_KERNELS = 10  # where, sub, div, add, exp, add, div (:73) and exp, add, div of s (:72)


@dataclass(frozen=True)
class LazyEviction(GroupOptionMethod):
    """LazyEviction (module docstring)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Zhang et al., LazyEviction: Lagged KV Eviction with Attention Pattern Observation for Efficient "
        "Long Reasoning (arXiv 2506.15969): recurrence interval tracking, MRI-centric eviction every W steps",
        "Halo-949/LazyEviction model/kv_utils.py (Window_LAZYKVCluster.update_kv_in_decoding), "
        "model/temp_cacheobs.py (TempCache.record_recurrence), model/llama_model.py (eager forward), read "
        "at its copy WeianMao/triattention e7a0eb1 LazyEviction/",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(LAZY_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(
            OpSpec("record", ("compute",), category="select"),
            OpSpec("evict", ("compute",), category="select"),
        ))

    def _schedule(self, ctx: CostContext) -> tuple[np.ndarray, np.ndarray]:
        """(S,) float64 tokens a head attends at each step and (S,) bool whether it evicts after it."""
        cfg = ctx.cfg
        rule = self.knobs.budget_rule
        steps = np.maximum(ctx.demand.context_tokens - cfg.input_tokens, 1).astype(np.int64)
        held = lazy_attended_tokens(cfg.input_tokens, int(steps.max()), cfg.budget_tokens,
                                    cfg.window_tokens, rule)
        after = np.append(held[1:], held[-1] + 1)  # what the next step attends
        attended = held[steps - 1]
        evicts = after[steps - 1] <= attended  # the next step attends fewer: an eviction in between
        return attended.astype(np.float64), evicts

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        sets = self.sets_per_layer(m)
        attended, _ = self._schedule(ctx)
        if ctx.as_published:
            tokens = np.where(ctx.demand.dense_layer[None, :], ctx.demand.context_tokens[:, None],
                              attended[:, None])
            return np.asarray(eager_attention_s(ctx, tokens, sets), dtype=np.float64)
        sparse = cost.kernel_s(4.0 * b * m.n_qo_heads * attended * d,
                               b * sets * attended * 2 * d * dt + 2 * b * m.n_qo_heads * d * dt
                               + b * m.n_qo_heads * attended * 4, 1)  # fused, probabilities written
        return layer_attention_s(ctx, sparse)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        sets = self.sets_per_layer(m)
        attended, evicts = self._schedule(ctx)
        entries = b * sets * attended  # recurrence-state entries (one per kept token and set)
        probs = b * m.n_qo_heads * attended * 4
        kept = lazy_capacity(cfg.budget_tokens, cfg.window_tokens, self.knobs.budget_rule)
        if ctx.as_published:
            # 2 cats (read + write 4 B), clone (8 B), compare (probs + 1 B), index-put, sub, maximum
            record = cost.kernel_s(0.0, entries * (2 * 8 + 8 + 1 + 5 + 12 + 12) + probs, 7)
            state = entries * 8 * (_SCORE_KERNELS + 2) + 2 * b * sets * kept * 8 * 2
            kv = 2 * b * sets * kept * 2 * d * dt  # K and V gathered and concatenated, read and written
            evict = np.where(evicts, cost.kernel_s(0.0, state + kv, _SCORE_KERNELS + 1 + 6 + 4), 0.0)
        else:
            record = cost.kernel_s(0.0, probs + entries * 12, 1)
            evict = np.where(evicts, cost.kernel_s(0.0, entries * 8, 1), 0.0)
        return own_kernels(ctx, {"record": record, "evict": evict},
                           {"record": LAZY_RECORD, "evict": LAZY_EVICT})

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU bytes per sequence: the most tokens a head holds over the run (K, V and 8 B of recurrence
        state each) per kept set on sparse layers, the whole context on dense layers; no host."""
        d, dt = model.head_dim, cfg.dtype_bytes
        held = lazy_attended_tokens(cfg.input_tokens, max(cfg.output_tokens, 1), cfg.budget_tokens,
                                    cfg.window_tokens, self.knobs.budget_rule)
        most = int(held.max())
        n_sparse, n_dense = layer_split(cfg, model)
        sets = self.sets_per_layer(model)
        gpu = n_sparse * sets * most * (2 * d * dt + 8)
        gpu += n_dense * cfg.max_context_tokens * 2 * model.n_kv_heads * d * dt
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(gpu), host_per_seq_bytes=0)
