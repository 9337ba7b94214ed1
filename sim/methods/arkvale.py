"""ArkVale: page eviction to host memory with recall of pages whose digests score high again.

Source: Chen et al., "ArkVale: Efficient Generative LLM Inference with Recallable Key-Value Eviction"
(NeurIPS 2024) and its code (pku-liang/ArkVale; a copy read at AndreyBocharnikov/ArkVale,
source/arkvale/infer_state.py and kv_cache.py). Assumptions (docs/methods.md has the discussion):

- Offload: every filled page is backed up to a pinned host pool (device->host, one page of all KV
  heads per sequence, contiguous) when it leaves the window; the GPU keeps `budget_tokens` per KV head
  (sink + cached pages + window) and a digest per page: a bounding box of its keys (centre +- mean
  absolute deviation, 2 * d elements per page and KV head, computed when the page fills).
- Every decode step and every (non-dense) layer, on the critical path and blocking: score all
  candidate pages from their digests, top-k, compare with the pages resident on GPU (ArkVale's own
  cache reuse), read the list of pages to recall back to the host (a host sync: the code indexes GPU
  tensors from Python to loop over them), then recall every missed page and only then attend.
  No speculation: nothing overlaps the recall except what the copy engine does.
- Recall granularity: one copy per (sequence, selection group, missed page). The host pool keeps the
  GPU's NHD page layout (2, p, n_kv, d), so the part of a page that belongs to a group of
  `group_heads` KV heads is 2 * p runs of group_heads * d elements (256 B for one head of d = 128 in
  bf16): fragmented transfers. Default group_heads = 1 (one page set per KV head, as in the FreeKV
  paper's comparison: its runtime's ArkVale baseline, `--recall_impl arkvale`, runs ArkVale's recall
  loop with group_size=1, rooikeee/FreeKV 074f14d source/pred.py:283 and :327, freekv/infer_state.py
  :1210-1225); group_heads = n_kv_heads models ArkVale's own code default of one page set for all
  heads (pku-liang/ArkVale source/arkvale/infer_state.py:149-152: whole pages, contiguous), which
  benchmarks/validate_sim.py uses for ArkVale's own results.
- Copies are issued one by one by the single Python thread (issue_threads = 1). `issue_overhead_s`
  adds per-copy host time beyond the driver's cudaMemcpyAsync cost (e.g. Python/torch dispatch of the
  per-page `copy_`); default 0 models the hardware limit.
- Recall demand: the pages that missed the GPU cache, from the trace (all misses are synchronous here).

As published (SimConfig.implementation "as-published"; "ideal" charges none of this and issues copies at
the hardware profile's cost). The code (pku-liang/ArkVale at 0c3b45e) patches HF Transformers' Llama
(eager PyTorch) and manages pages from Python:
- plan, once per step (layer 0): InferState._prepare_decode (source/arkvale/infer_state.py:259-326)
  loops in Python over the layers to allocate the new token's slot (decode_alloc_1_token, :262-272),
  about 4 Python steps per layer, and re-plans FlashInfer's decode (begin_forward, :317-326: one
  extension call plus a host->device copy of the page tables, priced as one read-back).
- qkv: RMSNorm (adapter/modeling.py:24, extension), q/k/v projections (modeling.py:75-77, 3 eager
  ops), views (:79-83, 3 Python steps), RoPE and append (modeling.py:124, :136, 2 extension calls),
  plus one HF decoder-layer module call.
- select (sparse layers): estimate_scores and select_topk (infer_state.py:367-403): 2 extension calls
  and ~10 Python view/slice steps.
- recall: InferState.recall (infer_state.py:405-424) loops in Python over (sequence, group):
  `nr = rids[i, j, 0]; if nr == 0` reads a GPU value back (the host waits for select: host_sync on
  select); for a group with misses the two slices bounded by `nr + nw` / `nr + 1` (2 eager adds) read
  it back twice more (groups with a miss: min(groups, recalled copies), the demand has no per-group
  counts); then per recalled page `kvc.pool[ei]` indexes the GPU pool with a CUDA scalar and `cpu_kvc[i, ri]`
  indexes the CPU cache's c2p table with one (kv_cache.py:99-100; the CPU pool lookup that follows is
  on host tensors): 2 read-backs and ~4 Python steps (tensor iteration, head slices), then one
  `copy_(non_blocking=True)` of the page slice (torch_copy_call_s), on the current stream
  (infer_state.py:421-424). Each read-back syncs that stream, so the next page's first read-back waits
  for this page's copy: host work and copies alternate. The Transfer has issuer "host" and issue_s =
  the host work of one page + the copy's own time (the wait), so the main thread is busy for both.
- backup / digest, when a page fills: decode_backup_1_page (infer_state.py:440-446), one torch copy_
  per sequence (issued by the host), and decode_save_1_digest (:474-482): a per-sequence Python list,
  torch.cat and the digest (_summarize_keys, :448-462: ~5 eager ops).
- attention: decode_sdpa (infer_state.py:544, FlashInfer via the extension): 1 extension call.
- out_proj: o_proj + residual add (modeling.py:184; HF decoder layer): 2 eager ops. ffn: RMSNorm
  (extension) + HF LlamaMLP (gate, act, up, mul, down) + residual add: 1 extension call + 6 eager ops.
- lm_head: final norm, LM head and HF generate's sampling/stopping ops (~6 eager ops) and the read-back
  of the token (host_sync).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.errors import SimInputError
from sim.methods.base import CostContext, Dep, Kernel, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import (
    DecoderMethod,
    OwnOps,
    attention_over,
    layer_split,
    prefill_offload_exposed_s,
)
from sim.methods.eager import DecoderRecipe, ext_hf_decoder
from sim.methods.host_costs import HostOps, host_s
from traces.models import ModelSpec

__all__ = ["ArkVale", "ARKVALE_DECODER"]

# HF Llama patched by ArkVale (module docstring): qkv, attention, out_proj, ffn, lm_head + generate glue
ARKVALE_DECODER = ext_hf_decoder(
    qkv=HostOps(torch_ops=3, ext_calls=3, cpp_launches=3, python_ops=3, python_layers=1),
    step=HostOps(torch_ops=6, readbacks=1),
)


@dataclass(frozen=True)
class ArkVale(DecoderMethod):
    """ArkVale (module docstring). group_heads: KV heads per selection group; issue_overhead_s: s/copy."""

    sources: ClassVar[tuple[str, ...]] = (
        "Chen et al., ArkVale: Efficient Generative LLM Inference with Recallable Key-Value Eviction "
        "(NeurIPS 2024): page digests, backup of evicted pages, recall of pages that become important",
        "pku-liang/ArkVale code (read at AndreyBocharnikov/ArkVale source/arkvale/infer_state.py): "
        "estimate_select_recall per layer, per-page copy_ loop over (batch, group) with CUDA-scalar "
        "indexing (read-backs), NHD page pool; read again at pku-liang/ArkVale 0c3b45e",
        "ArkVale paper Fig. 4b: average page recalls per decoding step vs cache capacity and top-k "
        "(the demand of benchmarks/validate_sim.py)",
    )

    def recipe(self) -> DecoderRecipe:
        return ARKVALE_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(
            before_qkv=(OpSpec("plan", (), category="host"),),
            after_qkv=(
                OpSpec("digest", ("compute",), category="other"),
                OpSpec("backup", ("offload", "d2h"), (Dep("qkv"),), category="offload"),
                OpSpec("select", ("compute",), host_sync=True, category="select"),
                OpSpec("recall", ("recall_sync", "h2d"), (Dep("select"),), category="recall"),
            ),
            attention_deps=(Dep("recall"),),
        )

    def _group_heads(self, model: ModelSpec) -> int:
        if model.n_kv_heads % self.knobs.group_heads:
            raise SimInputError(
                f"method_options.group_heads={self.knobs.group_heads} must divide {model.name}'s "
                f"{model.n_kv_heads} KV heads"
            )
        return self.knobs.group_heads

    def _ideal_issue_s(self, ctx: CostContext) -> float:
        """Host seconds per copy in ideal mode: the driver's cost + `issue_overhead_s`."""
        return ctx.profile.link.copy_issue_s + self.knobs.issue_overhead_s

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return attention_over(ctx, np.minimum(ctx.demand.context_tokens, ctx.cfg.budget_tokens))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        b, d, dt, p = cfg.batch_size, m.head_dim, cfg.dtype_bytes, cfg.page_size
        dense = dem.dense_layer[None, :]
        has_candidates = (dem.candidate_pages > 0)[:, None] & ~dense
        page_done = ((dem.context_tokens % p) == 0)[:, None] & ~dense  # (S, L)
        page_all_heads = 2 * p * m.n_kv_heads * d * dt
        digest = float(cost.kernel_s(4.0 * b * m.n_kv_heads * p * d, b * m.n_kv_heads * (p + 2) * d * dt, 1))
        pub = ctx.as_published
        plan = np.zeros(ctx.shape)
        prepare = HostOps(python_ops=4 * m.n_layers, ext_calls=1, cpp_launches=1, readbacks=1)
        plan[:, 0] = host_s(ctx, prepare)
        backup_issue = host_s(ctx, HostOps(torch_copies=1)) if pub else self._ideal_issue_s(ctx)
        digest_host = host_s(ctx, HostOps(torch_ops=6, python_ops=b))
        select = ctx.full(cost.select_s(dem.candidate_pages))
        return {
            "plan": Kernel(np.zeros(ctx.shape), host_s=plan),
            "digest": Kernel(np.where(page_done, digest, 0.0), host_s=np.where(page_done, digest_host, 0.0)),
            "backup": Transfer(
                direction="d2h",
                n_copies=np.where(page_done, b, 0).astype(np.int64),
                copy_s=float(cost.copy_s(page_all_heads, page_all_heads, "d2h")),
                bytes_per_copy=page_all_heads,
                issue_s=backup_issue,
                issue_threads=1,
                issuer="host" if pub else "pool",
            ),
            "select": Kernel(
                np.where(has_candidates, select, 0.0),
                host_s=np.where(
                    has_candidates, host_s(ctx, HostOps(ext_calls=2, cpp_launches=2, python_ops=10)), 0.0
                ),
            ),
            "recall": self._recall(ctx, has_candidates),
        }

    def _recall(self, ctx: CostContext, has_candidates: np.ndarray) -> Transfer:
        """The blocking recall of the missed pages (module docstring), one copy per (sequence, group,
        page); as published, issued by the main thread's Python loop."""
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        b, d, dt, p = cfg.batch_size, m.head_dim, cfg.dtype_bytes, cfg.page_size
        dense = dem.dense_layer[None, :]
        gh = self._group_heads(m)
        # a group's share of a page: K and V, p tokens each, gh heads of d elements per token (NHD)
        copy_bytes = 2 * p * gh * d * dt
        run_bytes = 2 * p * m.n_kv_heads * d * dt if gh == m.n_kv_heads else gh * d * dt
        # recalled (sequence, KV head, page): the trace's fetched tokens / p (ArkVale's own trace; FreeKV's
        # missed pages x p when its trace is transplanted, or synthetic); a group recalls a page once for its
        # gh heads
        pages = -(-dem.fetched_tokens // p)
        copies = -(-pages // gh)
        copies = np.where(dense, 0, copies).astype(np.int64)
        sparse = np.where(dense, 0.0, 1.0) * np.ones(ctx.shape)
        groups = m.n_kv_heads // gh
        # recall loop: per (sequence, group) 1 read-back (nr == 0) + 1 Python step; for groups with a
        # miss (infer_state.py:418-419 skip the others) + 2 read-backs (slice bounds) + 2 eager adds + 2
        # Python steps; per page 2 read-backs (CUDA-scalar indexing) + 4 Python steps + 1 copy_.
        # Groups with a miss: at most one per copy (the demand has no per-group counts).
        missed_groups = np.minimum(b * groups, copies)
        loop = b * groups * host_s(ctx, HostOps(readbacks=1, python_ops=1)) + missed_groups * host_s(
            ctx, HostOps(readbacks=2, torch_ops=2, python_ops=2)
        )
        per_page = host_s(ctx, HostOps(readbacks=2, python_ops=4, torch_copies=1))
        recall_copy_s = float(cost.copy_s(copy_bytes, run_bytes, "h2d"))
        # as published the host waits for each copy before the next page's read-back (docstring)
        pub = ctx.as_published
        recall_issue = per_page + recall_copy_s if pub else self._ideal_issue_s(ctx)
        return Transfer(
            direction="h2d",
            n_copies=copies,
            copy_s=recall_copy_s,
            bytes_per_copy=copy_bytes,
            issue_s=recall_issue,
            issue_threads=1,
            host_s=np.where(has_candidates, loop, 0.0) * sparse,
            issuer="host" if pub else "pool",
        )

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU: budget tokens per KV head + digests on sparse layers, full KV on dense ones. Host: all KV."""
        per_token_layer = 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        ctx_tokens = cfg.max_context_tokens
        n_sparse, n_dense = layer_split(cfg, model)
        pages = -(-ctx_tokens // cfg.page_size)
        gpu = per_token_layer * (
            n_sparse * (min(cfg.budget_tokens, ctx_tokens) + pages) + n_dense * ctx_tokens
        )
        return MemoryNeed(
            gpu_fixed_bytes=0,
            gpu_per_seq_bytes=int(gpu),
            host_per_seq_bytes=int(n_sparse * ctx_tokens * per_token_layer),
        )

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill; each layer's prompt pages are backed up d2h behind the next layer's compute."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        m, cfg = ctx.model, ctx.cfg
        layer_bytes = cfg.batch_size * cfg.input_tokens * 2 * m.n_kv_heads * m.head_dim * cfg.dtype_bytes
        parts["prefill_offload_exposed"] = prefill_offload_exposed_s(ctx, parts, layer_bytes, m.n_layers)
        return parts
