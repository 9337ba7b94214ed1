"""ClusterKV: prompt keys clustered in semantic space; each step the clusters whose centroids score highest
under the query are recalled from the host and attended.

Liu et al., "ClusterKV: Manipulating LLM KV Cache in Semantic Space for Recallable Compression" (DAC 2025,
arXiv 2412.03213); public code sjtu-zhao-lab/ClusterKV (read at cb66a22), what this policy follows:
- clustering at prefill, per KV head, of the prompt keys after the `sink` tokens (accuracy/
  cluster_attention.py `forward_cluster` 265-275, `build_cluster` 34-84): k-means with `nlist` = 400
  clusters, `fit_iter` = 20 iterations, cosine distance (accuracy/patch.py 30-41); each key joins the
  centroid of highest cosine similarity (53-55);
- selection at every decode step (`cluster_attn_out` 100-180): the query's inner product with every
  centroid (108), clusters sorted best first (109), as many as needed for their tokens to reach budget -
  sink (112-118), truncated to budget - sink tokens in cluster order, a cluster's tokens by position
  (155, "truc"); attention over sink + selected + the tokens after the prompt (207-209);
- GQA: per query head by default (centroids repeated, 78-82) or the group's averaged query
  (`gqa_policy` "qavg", patch.py 37): here one selection per KV head, `group_pooling` mean (qavg, the
  default) or max of the query heads' centroid scores;
- layers 0 and 1 are dense in its harness (forward_cluster 247); here `dense_layers`.

Here, on the paged-retrieval mechanism (freekv_runtime.policies._sync_retrieval: the whole KV on the host,
a cache of selected slots per KV head on the device, misses recalled synchronously before attention, as
ClusterKV's offloading runtime recalls selected clusters, clusterkv/clusterkv_models/ClusterKVAttention.py
110-170): a page's score is the best pooled score of the clusters its tokens belong to, so with
page_size 1 the top-k candidates are exactly the tokens of the best clusters, the last one truncated by
position (the top-k breaks ties to the lower index), which is ClusterKV's selection; larger pages recall
whole pages holding the best clusters' tokens (a paged variant). The budget convention: sink + selected +
window = budget_tokens (ClusterKV attends every generated token beyond the budget; here the newest
window_tokens, and older generated tokens are candidates: each is assigned to its nearest centroid when
appended, where ClusterKV's runtime re-clusters every `window` = 320 generated tokens into 8 clusters,
ClusterKVAttention.py 121-131). Deterministic k-means: the centroids start at evenly spaced keys (cuVS
k-means++ is random) and are the means of their keys; an empty cluster keeps its centroid.

Configuration: RuntimeConfig budget_tokens, page_size (1 for ClusterKV's token granularity), sink_tokens
(ClusterKV: 16), window_tokens, dense_layers; `config.knobs` (traces.catalogue.retrieval.ClusterKVKnobs):
clusters (400), iterations (20), group_pooling (mean), and the mechanism's staging_pages, pool_chunk_pages.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies._paged_retrieval import PagedRetrievalPolicy
from freekv_runtime.policies._sync_retrieval import SynchronousRetrievalState

__all__ = ["ClusterKVPolicy", "ClusterKVState", "cosine_kmeans"]


def cosine_kmeans(x: torch.Tensor, k: int, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k-means of the rows of x (B, n, d) with cosine assignment: (centroids (B, k', d) float32, the means
    of their rows; assignment (B, n) int64), k' = min(k, n); centroids start at evenly spaced rows."""
    bsz, n, d = x.shape
    k = min(k, n)
    xf = x.float()
    xn = F.normalize(xf, dim=-1)
    centroids = xf[:, (torch.arange(k, device=x.device) * n) // k].clone()
    assign = torch.zeros(bsz, n, dtype=torch.int64, device=x.device)
    for _ in range(iterations):
        assign = (xn @ F.normalize(centroids, dim=-1).transpose(1, 2)).argmax(-1)
        sums = torch.zeros_like(centroids).scatter_add_(1, assign[..., None].expand(-1, -1, d), xf)
        ones = torch.ones(bsz, n, device=x.device)
        counts = torch.zeros(bsz, k, device=x.device).scatter_add_(1, assign, ones)
        centroids = torch.where(counts[..., None] > 0, sums / counts.clamp(min=1)[..., None], centroids)
    assign = (xn @ F.normalize(centroids, dim=-1).transpose(1, 2)).argmax(-1)
    return centroids, assign


class ClusterKVState(SynchronousRetrievalState):
    """centroids[l] (b, Hkv, C, d) float32 and assign[l] (b, Hkv, N) int64 (-1: sink tokens, never
    candidates) per sparse layer."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        n = self.shape.n_layers
        self.centroids: list[torch.Tensor | None] = [None] * n
        self.assign: list[torch.Tensor | None] = [None] * n
        self._layer_of = {id(store): layer for layer, store in enumerate(self.stores)}

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if layer not in self.config.dense_layers:
            b, hkv, t, d = k.shape
            sink = min(self.config.sink_tokens, t - 1)
            knobs = self.config.knobs
            keys = k[:, :, sink:].reshape(b * hkv, t - sink, d)
            with self.timer.op("select"):
                centroids, assign = cosine_kmeans(keys, knobs.clusters, knobs.iterations)
            self.centroids[layer] = centroids.reshape(b, hkv, -1, d)
            sink_ids = torch.full((b, hkv, sink), -1, dtype=torch.int64, device=k.device)
            self.assign[layer] = torch.cat([sink_ids, assign.reshape(b, hkv, t - sink)], dim=2)
        return super().prefill(layer, q, k, v)

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        centroids = self.centroids[layer]
        if centroids is not None:
            # (b, Hkv, 1, C): the new key joins its nearest centroid by cosine
            sim = F.normalize(k.float(), dim=-1) @ F.normalize(centroids, dim=-1).transpose(-1, -2)
            self.assign[layer] = torch.cat([self.assign[layer], sim.argmax(-1)], dim=2)
        return super().decode(layer, q, k, v)

    def page_scores(self, store: PagedKVStore, q: torch.Tensor, hi: int) -> torch.Tensor:
        """(b, Hkv, hi) the best pooled centroid score among each page's tokens, -inf outside the
        candidates (module docstring)."""
        layer = self._layer_of[id(store)]
        centroids, assign = self.centroids[layer], self.assign[layer]
        assert centroids is not None and assign is not None
        b, hkv, n_clusters, d = centroids.shape
        qg = q.float().reshape(b, hkv, -1, d)
        scores = qg @ centroids.transpose(-1, -2)  # (b, Hkv, G, C)
        pooled = scores.mean(2) if self.config.knobs.group_pooling == "mean" else scores.amax(2)
        p = store.p
        tokens = assign[:, :, : hi * p]
        token_scores = pooled.gather(2, tokens.clamp(min=0)).masked_fill(tokens < 0, float("-inf"))
        page = token_scores.reshape(b, hkv, hi, p).amax(-1)
        lo, top = store.candidate_range()
        pos = torch.arange(hi, device=page.device)
        return page.masked_fill((pos < lo) | (pos >= top), float("-inf"))


class ClusterKVPolicy(PagedRetrievalPolicy):
    state_class = ClusterKVState
