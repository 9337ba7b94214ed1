"""Quest: query-aware page selection over a KV cache that stays entirely on the GPU.

Source: Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference" (ICML 2024,
arXiv 2406.10774) and its code (mit-han-lab/Quest). Assumptions (docs/methods.md has the discussion):

- No offload: the whole KV cache of every sequence stays in GPU memory, plus per-page metadata: the
  per-channel min and max of the page's keys (2 * d elements per page and KV head). Nothing crosses
  the host link, so the link profile does not matter.
- Every decode step and every (non-dense) layer, on the critical path: "estimate" scores every
  candidate page from its min/max (reading all summaries: cost grows with the context), top-k picks
  (budget - sink - window) / p pages, then sparse attention over sink + selected + window pages.
- `selection` per-query-head by default (Quest's code, evaluation/quest_attention.py:139-146 repeats K
  to every query head; :211-215 top-k per head): every query head scores pages and selects its own
  pages, so a GQA group of G query heads reads G sets of summaries and attends G different page sets:
  selection and attention traffic are O(B * n_qo), not O(B * n_kv). `selection=per-kv-head` models the
  variant of the FreeKV paper's accuracy setup (scores pooled over the group, one page set per KV head).
- When a page fills, its min/max summary is computed by a small kernel.
- The Quest paper keeps the first two layers dense; here dense layers come from `SimConfig.dense_layers`
  (same for every method, for a like-for-like comparison).
- Offloaded variant (`offload=True`; not in Quest's code, which keeps everything on the GPU): the KV of
  sparse layers lives in host memory, the GPU keeps the page summaries and a budget cache per KV head,
  and after top-k the selected pages missing from that cache are recalled synchronously (one copy of K
  and V, p tokens of one head, per page; attention waits). Pages recalled: from Quest's own trace,
  its fetched tokens / p per layer and step (BatchDemand.fetched_tokens); without one, every selected
  page every step (no reuse, the closed form). Per query head, a KV head recalls and keeps the union of
  its group's pages: the runtime's trace records that union per KV head (its selected and missed pages),
  so a replay of Quest's own trace prices the measured union; the closed form and the device cache are
  sized for the worst case, G disjoint sets (G x the selected pages per KV head, as the runtime's slot
  cache). No public code runs it, so both modes issue its copies
  at the profile's `link.copy_issue_s` on `host.issue_threads` threads.

As published (SimConfig.implementation "as-published"; "ideal" charges none of this). Quest's
end-to-end framework is HF Transformers' Llama in eager PyTorch with Quest's kernels called from Python
(code read at mit-han-lab/Quest, commit of the stored snapshot). Host costs charged per layer (priced by
sim/methods/host_costs.py with the software profile):
- qkv: RMSNorm (quest/models/llama.py:72, a Quest kernel called from Python), q/k/v projections as
  three eager F.linear (quest/models/QuestAttention.py:88-90), RoPE (QuestAttention.py:99) and
  append_kv (QuestAttention.py:106): 3 eager ops + 3 extension calls, plus one HF decoder-layer module
  call (python_layer_s).
- select (sparse layers): decode_estimate (QuestAttention.py:136) and decode_topk (:144): 2 extension
  calls. attention: decode_sparse_attn (:127 dense / :151 sparse): 1 extension call.
- out_proj: o_proj (QuestAttention.py:175) + residual add (quest/models/llama.py:154): 2 eager ops.
- ffn: post-attention RMSNorm (llama.py:159, :72; 1 extension call) + LlamaMLP gate, act, up, mul,
  down (llama.py:99) + residual add: 6 eager ops.
- plan, once per step at layer 0 and again at the first sparse layer: InferenceController.begin_forward
  (quest/models/llama.py:430, :439; quest/utils/controller.py:80-129) builds the page tables with
  `torch.tensor(python_list, device=cuda)`: at the step's first call 6 blocking host-to-device copies
  (controller.py:84, 85, 103, 106, 109, 115; each a read-back-priced synchronous copy: the host waits for
  the stream), three of them from Python lists of ~n_pages ids (python_list_elem_s per element), a
  .repeat and 3 torch.zeros (:106, :118-120) and the decode handler's begin_forward (:122); at the second
  (updateTensor False) the copy at :115, the zeros and the handler (`published_plan_s`). The host waits
  for the GPU there (host_sync).
- lm_head + sampling: final norm, LM head, sampling ops (3 eager ops) and the token read-back that ends
  each step (host_sync).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, Kernel, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import GroupOptionMethod, OwnOps, layer_attention_s, layer_split
from sim.methods.eager import DecoderRecipe, ext_hf_decoder
from sim.methods.host_costs import HostOps, host_s
from traces.models import ModelSpec

__all__ = ["Quest", "QUEST_DECODER"]

# HF Llama with Quest's kernels (module docstring): qkv, attention, out_proj, ffn, lm_head + sampling
QUEST_DECODER = ext_hf_decoder(
    qkv=HostOps(torch_ops=3, ext_calls=3, cpp_launches=3, python_layers=1),
    step=HostOps(torch_ops=3, readbacks=1),
)


@dataclass(frozen=True)
class Quest(GroupOptionMethod):
    """Quest (module docstring). selection per-kv-head: one page set per KV head instead of per query
    head."""

    needs_demand: ClassVar[bool] = False
    own_demand_optional: ClassVar[bool] = True  # the offloaded variant recalls what its trace fetched

    sources: ClassVar[tuple[str, ...]] = (
        "Tang et al., Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference (ICML 2024, "
        "arXiv 2406.10774), Sec. 3 (criticality estimation from per-page min/max keys, top-k pages)",
        "mit-han-lab/Quest: estimate, top-k and sparse decode kernels run every step on the GPU, called "
        "from an eager HF Llama (quest/models/QuestAttention.py, quest/models/llama.py, "
        "quest/utils/controller.py: per-step page tables built with blocking torch.tensor copies)",
        "Liu et al., FreeKV (arXiv 2505.13109), evaluation setup: Quest made group-consistent with max "
        "pooling for accuracy (option selection=per-kv-head)",
    )

    def optional_demand(self) -> bool:
        """Only the offloaded variant recalls anything: the one that prices its own trace."""
        return self.knobs.offload

    def recipe(self) -> DecoderRecipe:
        return QUEST_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        offload = self.knobs.offload
        recall = OpSpec("recall", ("recall_sync", "h2d"), (Dep("select"),), category="recall")
        return OwnOps(
            before_qkv=(OpSpec("plan", ("compute",), host_sync=True, category="host"),),
            after_qkv=(
                OpSpec("summary", ("compute",), category="other"),
                OpSpec("select", ("compute",), category="select"),
                *((recall,) if offload else ()),
            ),
            attention_deps=(Dep("recall"),) if offload else (),
        )

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        """Each selecting head reads its own K and V pages (G copies of traffic per group if not
        group-consistent); dense layers attend the whole context once per KV head."""
        cfg, m = ctx.cfg, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        heads = self.sets_per_layer(m)
        sparse_tokens = np.minimum(ctx.demand.context_tokens, cfg.budget_tokens).astype(np.float64)
        attn_sparse = ctx.cost.kernel_s(
            4.0 * b * m.n_qo_heads * sparse_tokens * d,
            b * heads * sparse_tokens * 2 * d * dt + 2 * b * m.n_qo_heads * d * dt,
            1,
        )
        return layer_attention_s(ctx, attn_sparse)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        dense = dem.dense_layer[None, :]
        page_done = (dem.context_tokens % cfg.page_size) == 0
        summary = float(
            cost.kernel_s(
                2.0 * b * m.n_kv_heads * cfg.page_size * d, b * m.n_kv_heads * (cfg.page_size + 2) * d * dt, 1
            )
        )
        recall = {"recall": self.recall(ctx)} if self.knobs.offload else {}
        return {
            **recall,
            "plan": self._plan(ctx),
            "summary": Kernel(np.where(dense, 0.0, ctx.full(np.where(page_done, summary, 0.0)))),
            "select": Kernel(
                np.where(dense, 0.0, ctx.full(self._select_s(ctx))),
                host_s=np.where(dense, 0.0, host_s(ctx, HostOps(ext_calls=2, cpp_launches=2)))
                * np.ones(ctx.shape),
            ),
        }

    def _select_s(self, ctx: CostContext) -> np.ndarray:
        """(S,) estimate + top-k: every selecting head reads 2*d summary elements per candidate page,
        writes an fp32 score per query head per page (read back by top-k)."""
        cfg, m = ctx.cfg, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        heads = self.sets_per_layer(m)
        pages = ctx.demand.candidate_pages.astype(np.float64)  # (S,)
        sel_bytes = b * heads * pages * 2 * d * dt + 3 * b * m.n_qo_heads * pages * 4
        sel_flops = 4.0 * b * m.n_qo_heads * pages * d
        return np.where(pages > 0, ctx.cost.kernel_s(sel_flops, sel_bytes, 2), 0.0)

    @staticmethod
    def _plan(ctx: CostContext) -> Kernel:
        """As published: page tables rebuilt at layer 0 and at the first sparse layer (module docstring;
        priced by `published_plan_s`)."""
        plan_at = np.zeros(ctx.model.n_layers, dtype=bool)
        if ctx.as_published:
            plan_at[0] = True
            sparse_layers = np.flatnonzero(~ctx.demand.dense_layer)
            if len(sparse_layers):
                plan_at[sparse_layers[0]] = True
        plan_gpu, plan_host = published_plan_s(ctx, plan_at)
        return Kernel(plan_gpu, host_s=plan_host)

    def recall(self, ctx: CostContext) -> Transfer:
        """The offloaded variant's synchronous recall (module docstring): one copy per recalled (sequence,
        KV head, page), K and V of p tokens of one head."""
        cfg, dem, m, link = ctx.cfg, ctx.demand, ctx.model, ctx.profile.link
        p = cfg.page_size
        if dem.method == self.replays:
            pages = -(-dem.fetched_tokens // p)
        else:  # every selected page of every page set, every step past the budget
            pages = ctx.full(dem.selected_per_head * cfg.batch_size * self.sets_per_layer(m))
        pages = np.where(dem.dense_layer[None, :], 0, pages).astype(np.int64)
        copy_bytes = 2 * p * m.head_dim * cfg.dtype_bytes
        return Transfer(
            direction="h2d",
            n_copies=pages,
            copy_s=float(ctx.cost.copy_s(copy_bytes, copy_bytes, "h2d")),
            bytes_per_copy=copy_bytes,
            issue_s=link.copy_issue_s,
            issue_threads=ctx.profile.host.issue_threads,
        )

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Full KV of every layer on GPU, plus min/max summaries (2*d per page and KV head) when sparse.
        Offloaded: sparse layers keep a budget cache per page set on the GPU and all their KV on the host."""
        ctx_tokens = cfg.max_context_tokens
        n_sparse, _ = layer_split(cfg, model)
        pages = -(-ctx_tokens // cfg.page_size)
        summaries = n_sparse * pages * model.n_kv_heads * 2 * model.head_dim * cfg.dtype_bytes
        per_token = model.kv_bytes_per_token(cfg.dtype_bytes)
        if not self.knobs.offload:
            return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(ctx_tokens * per_token + summaries),
                              host_per_seq_bytes=0)
        per_layer = per_token / model.n_layers  # K and V of one token, every KV head, one layer
        cache = min(cfg.budget_tokens, ctx_tokens) * 2 * model.head_dim * cfg.dtype_bytes
        dense_kv = (model.n_layers - n_sparse) * ctx_tokens * per_layer
        gpu = n_sparse * self.sets_per_layer(model) * cache + dense_kv
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(gpu + summaries),
                          host_per_seq_bytes=int(n_sparse * ctx_tokens * per_layer))


# InferenceController.begin_forward for a decode step (mit-han-lab/Quest quest/utils/controller.py:80-129)
# with updateTensor (the first call of a step): torch.tensor(..., device=cuda) at 84, 85, 103, 106, 109,
# 115 (6 blocking host->device copies), .repeat (106) and 3 torch.zeros (118-120), the decode handler's
# begin_forward (122); without updateTensor (the call at the first sparse layer, quest/models/llama.py:439):
# 115, the zeros and the handler.
PLAN_FIRST = HostOps(torch_ops=4, readbacks=6, ext_calls=1)
PLAN_AGAIN = HostOps(torch_ops=3, readbacks=1, ext_calls=1)


def published_plan_s(ctx: CostContext, plan_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(GPU seconds, host seconds), each (S, L), of the page-table rebuilds at the layers `plan_at` (L,):
    the first of a step also turns three Python lists of page ids into tensors (controller.py:103, 106,
    109: the pages, the pages but the last, the metadata pages), python_list_elem_s per element. GPU:
    one DMA latency per blocking copy (a few hundred bytes to a few KiB each)."""
    first = np.zeros(ctx.model.n_layers, dtype=bool)
    first[np.argmax(plan_at)] = plan_at.any()
    again = plan_at & ~first
    pages = np.ceil(ctx.demand.context_tokens.astype(np.float64) / ctx.cfg.page_size)  # (S,)
    elems = 2.0 * pages + np.ceil(pages / ctx.cfg.page_size)
    sw = ctx.software
    lists = elems * sw.python_list_elem_s if ctx.as_published and sw is not None else np.zeros_like(elems)
    host_first = host_s(ctx, PLAN_FIRST) + lists
    host = np.where(first[None, :], np.asarray(host_first)[:, None], 0.0) + np.where(
        again[None, :], host_s(ctx, PLAN_AGAIN), 0.0
    )
    latency = ctx.profile.link.dma_latency_s
    gpu = np.where(first[None, :], 6 * latency, 0.0) + np.where(again[None, :], latency, 0.0)
    return gpu * np.ones(ctx.shape), host * np.ones(ctx.shape)
