"""ClusterKV: prompt keys clustered at prefill; each step the best clusters under the query are recalled
from the host and attended.

Source: Liu et al., "ClusterKV: Manipulating LLM KV Cache in Semantic Space for Recallable Compression"
(DAC 2025, arXiv 2412.03213) and its code (sjtu-zhao-lab/ClusterKV at cb66a22). Assumptions:

- Offload (clusterkv/clusterkv_utils/clusterkv_controller.py 40-80 with `offload`): the whole KV of the
  sparse layers in pinned host memory, written once at prefill (controller.py 303-304, behind the next
  layer's compute: "prefill_offload_exposed"); the GPU keeps sink + budget + window tokens per head and
  the centroids (`clusters` x d per KV head). Layers in `dense_layers` keep everything on the GPU.
- Prefill: cosine k-means per KV head and sparse layer, `iterations` rounds of the (T x clusters)
  similarity, argmax and mean update (build_cluster, accuracy/cluster_attention.py 34-84; cuVS in the
  runtime): "prefill_cluster".
- Decode, per step and sparse layer: `select` scores every centroid with every query head, sorts them,
  takes a prefix sum of the cluster sizes and builds the token index list (cluster_attention.py 108-155;
  `update_sel_indices` in ClusterKVAttention.py 151-162: ~5 kernels); `recall` copies the tokens that
  missed the GPU cache from the host before attention (the demand: the trace's fetched tokens, ClusterKV's
  own policy, freekv_runtime/policies/clusterkv.py), token-granular reads (runs of one head's d
  elements), one gathered transfer per layer-step; attention over min(context, budget) tokens.
- As published: the FlashInfer-based runtime (ClusterKVAttention.py 68-170: rope in place, append, the
  selection's extension calls, the sparse decode call) on an HF decoder. Its GPU cache is per query head
  (controller.py 44-47); priced per KV head, as the runtime policy keeps it. "ideal": no host cost.
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
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps, host_s
from traces.models import ModelSpec

__all__ = ["ClusterKV"]

# ClusterKVAttention.py 92-170: rope in place, append_kv, the sparse decode call (3 extension calls)
CLUSTERKV_ATTENTION = HostOps(ext_calls=3, cpp_launches=3, python_ops=8)
CLUSTERKV_SELECT = HostOps(ext_calls=2, cpp_launches=5, python_ops=4)  # update_sel_indices
_SELECT_KERNELS = 5  # centroid scores, sort, gather sizes, prefix sum, index search (cluster_attention.py)


@dataclass(frozen=True)
class ClusterKV(DecoderMethod):
    """ClusterKV (module docstring)."""

    sources: ClassVar[tuple[str, ...]] = (
        "Liu et al., ClusterKV: Manipulating LLM KV Cache in Semantic Space for Recallable Compression "
        "(DAC 2025, arXiv 2412.03213): cosine k-means of the prompt keys, clusters recalled by centroid "
        "score",
        "sjtu-zhao-lab/ClusterKV accuracy/cluster_attention.py (clustering and selection), "
        "clusterkv/clusterkv_models/ClusterKVAttention.py and clusterkv_utils/clusterkv_controller.py "
        "(offloading runtime)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(CLUSTERKV_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(
            after_qkv=(
                OpSpec("select", ("compute",), category="select"),
                OpSpec("recall", ("recall_sync", "h2d"), (Dep("select"),), category="recall"),
            ),
            attention_deps=(Dep("recall"),),
        )

    def n_clusters(self, cfg: SimConfig) -> int:
        """Clusters per KV head: `clusters`, at most the prompt tokens after the sink."""
        return max(1, min(self.knobs.clusters, cfg.input_tokens - cfg.sink_tokens))

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return attention_over(ctx, np.minimum(ctx.demand.context_tokens, ctx.cfg.budget_tokens))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        dense = dem.dense_layer[None, :]
        over = (dem.context_tokens > cfg.budget_tokens)[:, None] & ~dense  # selection runs
        c = self.n_clusters(cfg)
        scores = b * m.n_qo_heads * c * 4
        select = float(cost.kernel_s(2.0 * b * m.n_qo_heads * c * d,
                                     b * m.n_kv_heads * c * d * dt + 6 * scores, _SELECT_KERNELS))
        n_bytes = np.where(dense, 0, dem.fetched_tokens) * 2.0 * d * dt  # K and V of every fetched token
        copy_s = cost.copy_s(n_bytes, d * dt, "h2d")
        return {
            "select": Kernel(np.where(over, select, 0.0),
                             host_s=np.where(over, host_s(ctx, CLUSTERKV_SELECT), 0.0)),
            "recall": Transfer(direction="h2d", n_copies=(n_bytes > 0).astype(np.int64), copy_s=copy_s,
                               bytes_per_copy=n_bytes, issue_s=ctx.profile.link.copy_issue_s,
                               issue_threads=1),
        }

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU: budget tokens + centroids per KV head on sparse layers, the whole KV on dense ones; host:
        the whole KV of the sparse layers."""
        per_head_token = 2 * model.head_dim * cfg.dtype_bytes
        ctx_tokens = cfg.max_context_tokens
        n_sparse, n_dense = layer_split(cfg, model)
        centroid_bytes = self.n_clusters(cfg) * model.head_dim * cfg.dtype_bytes
        kept = min(cfg.budget_tokens, ctx_tokens) * per_head_token
        gpu = n_sparse * model.n_kv_heads * (kept + centroid_bytes)
        gpu += n_dense * model.n_kv_heads * ctx_tokens * per_head_token
        host = n_sparse * model.n_kv_heads * ctx_tokens * per_head_token
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(gpu), host_per_seq_bytes=int(host))

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill, the k-means of every sparse layer, the prompt's offload behind the compute."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        cfg, m = ctx.cfg, ctx.model
        b, d, t = cfg.batch_size, m.head_dim, cfg.input_tokens - cfg.sink_tokens
        n_sparse, _ = layer_split(cfg, m)
        c = self.n_clusters(cfg)
        rounds = self.knobs.iterations + 1
        flops = rounds * 2.0 * b * m.n_kv_heads * t * c * d
        n_bytes = rounds * b * m.n_kv_heads * (t * c * 4 + 2 * t * d * 4)
        parts["prefill_cluster"] = n_sparse * float(ctx.cost.kernel_s(flops, n_bytes, 4 * rounds))
        layer_bytes = b * cfg.input_tokens * 2 * m.n_kv_heads * d * cfg.dtype_bytes
        parts["prefill_offload_exposed"] = prefill_offload_exposed_s(ctx, parts, layer_bytes, n_sparse)
        return parts
