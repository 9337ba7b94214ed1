"""FreeKV and its ablations (hybrid layouts, double-buffered recall, speculative retrieval).

Source: Liu et al., "FreeKV: Boosting KV Cache Retrieval for Efficient LLM Inference" (ICLR 2026,
arXiv 2505.13109) and its official code (sjtu-zhao-lab/FreeKV), as restated in
docs/reference/freekv.md. Assumptions, each from that source unless marked (model choice):

- Per layer: QKV + RoPE + append; wait for this layer's recall from the previous step; correction check
  (group-mean cosine vs tau, flag read back: one host sync per layer); if any head is corrected,
  selection for all heads on the compute stream and a synchronous recall of the corrected heads'
  missed pages; attention over sink + selected + window; then background selection (none when it
  already ran) and background recall of the other heads' missed pages on a recall stream; output
  projection and FFN. LM head once per step, followed by a host sync (the sampled token is read).
- Two recall streams (here: one for corrections, one for speculation) share the host->device link.
- Recall copies: one cudaMemcpyAsync per (sequence, KV head, page) issued by a small host thread pool.
  Hybrid layouts: the host pool is HND, so a head-page is one contiguous run of 2*p*d elements, which
  lands in a staging buffer and is converted HND->NHD into the GPU cache by a kernel. Double buffering:
  two staging buffers, copy of one overlaps conversion of the other. (Model choice: a staging buffer
  holds `staging_pages` head-pages, default one head's selected pages.)
- Offload: when the current page of a layer fills, it is transposed NHD->HND and summarised on an
  offload stream and copied device->host (one copy per sequence: the HND page of all KV heads).
- Ablations (the FreeKV paper's, one optimisation removed at a time): no hybrid layouts = NHD host
  pool, a head-page is one strided copy for K and one for V, each `p` runs of d elements, landing in
  place (no staging, no conversion); no double
  buffering = one staging buffer; no speculative retrieval = selection and recall of all missed pages on
  the critical path every step (no correction check needed). `freekv-base` removes all three.
- Layers in `SimConfig.dense_layers` attend the whole context with no selection or recall.
- While the context fits the budget (ceil(context / p) <= budget pages) a layer attends what is resident
  (the whole context) with no check, selection or recall: the official runtime's `kvc.n_pages > budget`
  test (rooikeee/FreeKV source/freekv/adapter/modeling.py:210, "not reach the budget" at 289-291), for
  every variant (without speculation too: its select-and-recall sits in the same branch, 287-288).

Implementation modes (SimConfig.implementation): "ideal" is the above at hardware limits (per-copy issue
`link.copy_issue_s` on `host.issue_threads` threads, no host costs). "as-published" prices what the
official runtime (rooikeee/FreeKV `source/`) does on its host threads: per-op dispatch from Python,
one cudaMemcpyAsync per head-page issued by the main thread (corrections) or one pool worker
(background), per-layer check sync, read-backs, per-group syncs without double buffering, per-row
cudaMemcpy2DAsync without hybrid layouts; file and line for each cost in sim/methods/freekv_published.py
and docs/methods.md ("FreeKV as published").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, Kernel, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import (
    DecoderMethod,
    OwnOps,
    attention_over,
    layer_split,
    prefill_offload_exposed_s,
)
from sim.methods.eager import FREEKV_DECODER, DecoderRecipe
from traces.models import ModelSpec

__all__ = ["FreeKV", "FreeKVNoHybridLayout", "FreeKVNoDoubleBuffer", "FreeKVNoSpeculation", "FreeKVBase"]

_SOURCES = (
    "Liu et al., FreeKV (ICLR 2026, arXiv 2505.13109), sections on speculative retrieval, hybrid layouts "
    "and double-buffered streamed recall",
    "sjtu-zhao-lab/FreeKV official code: decode loop, recall streams, per head-page cudaMemcpyAsync",
    "rooikeee/FreeKV at 074f14d, source/freekv/adapter/modeling.py 101-312, source/freekv/infer_state.py "
    "1191-1319, source/freekv_cpp/src/recall_cpuhnd_2buf.cu, recall.cu, recall_corr.cu, "
    "estimate_select_recall.cu (as-published host costs: sim/methods/freekv_published.py)",
)


@dataclass(frozen=True)
class FreeKV(DecoderMethod):
    """FreeKV with its three system optimisations; see the module docstring for the assumptions."""

    hybrid_layouts: bool = True
    double_buffer: bool = True
    speculative: bool = True

    sources: ClassVar[tuple[str, ...]] = _SOURCES


    def recipe(self) -> DecoderRecipe:
        return FREEKV_DECODER

    # ----- own ops -----
    def own_ops(self, ctx: CostContext) -> OwnOps:
        # as published, the host reads the selection back (a sync) and waits for the blocking recall
        # (recall_cpuhnd_2buf.cu 47, 178-179; recall.cu 63, 245)
        blocking = ctx.as_published
        # as published, every layer uses the same pair of recall streams (n_recall_stream=2:
        # infer_state.py 277-280, 1232-1234, 1300-1302): the blocking correction recall queues behind
        # the background selection and recall still in flight on them
        sync_stream = "recall_bg" if blocking and self.speculative else "recall_sync"
        check = OpSpec("check", ("compute",), (Dep("qkv"), Dep("recall_bg", "prev_step")), True, "sync")
        background = (
            OpSpec("select_bg", ("recall_bg",), (Dep("qkv"),), category="select"),
            OpSpec(
                "recall_bg", ("recall_bg", "h2d"), (Dep("select_bg"), Dep("select_sync")), category="recall"
            ),
        )
        return OwnOps(
            after_qkv=(
                OpSpec("offload_prep", ("offload",), (Dep("qkv"),), category="offload"),
                OpSpec("offload", ("offload", "d2h"), (Dep("offload_prep"),), category="offload"),
                *((check,) if self.speculative else ()),
                OpSpec("select_sync", ("compute",), (Dep("qkv"),), blocking, "select"),
                OpSpec("recall_sync", (sync_stream, "h2d"), (Dep("select_sync"),), blocking, "recall"),
            ),
            attention_deps=(Dep("recall_sync"),),
            after_attention=background if self.speculative else (),
        )

    # ----- work -----
    def _recall(self, ctx: CostContext, head_pages: np.ndarray) -> Transfer:
        cost, cfg, link = ctx.cost, ctx.cfg, ctx.profile.link
        page_bytes = cost.page_bytes_per_head(cfg.page_size)
        common = dict(
            direction="h2d", issue_s=link.copy_issue_s, issue_threads=ctx.profile.host.issue_threads
        )
        if not self.hybrid_layouts:  # NHD pool: K and V of a head-page are two strided copies
            run = ctx.model.head_dim * cfg.dtype_bytes
            half = page_bytes // 2
            return Transfer(
                n_copies=2 * head_pages,
                copy_s=float(cost.copy_s(half, run, "h2d")),
                bytes_per_copy=half,
                **common,
            )
        staging = self.knobs.staging_pages or cfg.selected_pages
        return Transfer(
            n_copies=head_pages,
            copy_s=float(cost.copy_s(page_bytes, page_bytes, "h2d")),
            bytes_per_copy=page_bytes,
            chunk_copies=staging,
            buffers=2 if self.double_buffer else 1,
            convert_fixed_s=ctx.profile.gpu.kernel_launch_s,
            convert_per_copy_s=cost.convert_per_copy_s(page_bytes),
            **common,
        )

    def _offload(self, ctx: CostContext) -> dict[str, Work]:
        """The page-fill offload: transpose + summary kernel, one d2h copy per sequence (all KV heads)."""
        cfg, cost = ctx.cfg, ctx.cost
        filled = (ctx.demand.context_tokens % cfg.page_size) == 0
        page_done = filled[:, None] & np.ones(ctx.shape, dtype=bool)
        page_bytes_all_heads = ctx.model.n_kv_heads * cost.page_bytes_per_head(cfg.page_size)
        return {
            "offload_prep": Kernel(np.where(page_done, cost.offload_kernel_s(cfg.page_size), 0.0)),
            "offload": Transfer(
                direction="d2h",
                n_copies=np.where(page_done, cfg.batch_size, 0).astype(np.int64),
                copy_s=float(cost.copy_s(page_bytes_all_heads, page_bytes_all_heads, "d2h")),
                bytes_per_copy=page_bytes_all_heads,
                issue_s=ctx.profile.link.copy_issue_s,
                issue_threads=1,
            ),
        }

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return attention_over(ctx, np.minimum(ctx.demand.context_tokens, ctx.cfg.budget_tokens))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cost, dem = ctx.cost, ctx.demand
        dense = dem.dense_layer[None, :]
        select = ctx.full(cost.select_s(dem.candidate_pages))
        # no check, selection or recall while the context fits the budget (sim.demand, "budget")
        retrieving = dem.over_budget[:, None] & ~dense
        if self.speculative:
            sync_pages, bg_pages = dem.missed_sync, dem.missed_bg
            select_sync = np.where(dem.any_corrected & retrieving, select, 0.0)
            select_bg = np.where(~dem.any_corrected & retrieving, select, 0.0)
        else:
            sync_pages, bg_pages = dem.missed_total, np.zeros_like(dem.missed_bg)
            select_sync = np.where(retrieving, select, 0.0)
            select_bg = np.zeros_like(select)
        sync_pages = np.where(dense, 0, sync_pages).astype(np.int64)
        bg_pages = np.where(dense, 0, bg_pages).astype(np.int64)
        out: dict[str, Work] = {
            **self._offload(ctx),
            "select_sync": Kernel(select_sync),
            "recall_sync": self._recall(ctx, sync_pages),
        }
        if self.speculative:
            out["check"] = Kernel(np.where(retrieving, ctx.full(cost.check_s()), 0.0))
            out["select_bg"] = Kernel(select_bg)
            out["recall_bg"] = self._recall(ctx, bg_pages)
        if ctx.as_published:
            from sim.methods.freekv_published import published_work

            return published_work(self, ctx, out, sync_pages, bg_pages, retrieving)
        return out

    # ----- memory and prefill -----
    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        per_token_layer = 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        n_sparse, n_dense = layer_split(cfg, model)
        ctx_tokens = cfg.max_context_tokens
        pages = -(-ctx_tokens // cfg.page_size)
        gpu_seq = per_token_layer * (n_sparse * min(cfg.budget_tokens, ctx_tokens) + n_dense * ctx_tokens)
        gpu_seq += n_sparse * pages * per_token_layer  # min/max summaries: 2*d per page per head
        gpu_seq += model.n_layers * model.n_qo_heads * model.head_dim * cfg.dtype_bytes  # last queries
        page_bytes = 2 * cfg.page_size * model.head_dim * cfg.dtype_bytes
        staging = 0
        if self.hybrid_layouts:
            pages_per_buffer = self.knobs.staging_pages or cfg.selected_pages
            staging = 2 * (2 if self.double_buffer else 1) * pages_per_buffer * page_bytes  # 2 recall streams
        return MemoryNeed(
            gpu_fixed_bytes=staging,
            gpu_per_seq_bytes=int(gpu_seq),
            host_per_seq_bytes=int(model.n_layers * ctx_tokens * per_token_layer),
            staging_bytes=staging,
        )

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill; each layer's prompt KV is offloaded d2h behind the next layer's compute."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        m = ctx.model
        layer_bytes = (
            ctx.cfg.batch_size * ctx.cfg.input_tokens * 2 * m.n_kv_heads * m.head_dim * ctx.cfg.dtype_bytes
        )
        parts["prefill_offload_exposed"] = prefill_offload_exposed_s(ctx, parts, layer_bytes, m.n_layers)
        return parts


@dataclass(frozen=True)
class FreeKVNoHybridLayout(FreeKV):
    """FreeKV without hybrid layouts: NHD host pool, fragmented recall (module docstring)."""

    hybrid_layouts: bool = False


@dataclass(frozen=True)
class FreeKVNoDoubleBuffer(FreeKV):
    """FreeKV with one staging buffer: copy and HND->NHD conversion serialise."""

    double_buffer: bool = False


@dataclass(frozen=True)
class FreeKVNoSpeculation(FreeKV):
    """FreeKV without speculative retrieval: selection and recall on the critical path every step."""

    speculative: bool = False


@dataclass(frozen=True)
class FreeKVBase(FreeKV):
    """Retrieval with none of FreeKV's system optimisations (the ablation's starting point)."""

    hybrid_layouts: bool = False
    double_buffer: bool = False
    speculative: bool = False
