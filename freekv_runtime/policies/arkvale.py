"""ArkVale: page digests on the GPU, a GPU page cache of the budget, recall of pages that become important.

Chen et al., "ArkVale: Efficient Generative LLM Inference with Recallable Key-Value Eviction"
(NeurIPS 2024); public code pku-liang/ArkVale (read at commit 0c3b45e), what this policy follows:
- digests: source/arkvale/infer_state.py `_summarize_keys` (line 448): per page and key dimension
  centre = (max + min) / 2, radius = mean |k - centre|, box = centre +- radius (our page_summary "box");
- importance every decode step, in every layer with a budget, once the layer's pages exceed the budget:
  source/arkvale/adapter/modeling.py lines 150-165 (`estimate_select_recall` before attention);
- score of a page: sum_i max(q_i * hi_i, q_i * lo_i) per query head, unscaled (source/arkvale_cpp/src/
  estimate.cu line 43), averaged over the query heads of a group of KV heads (estimate.cu lines 556-560);
  `n_groups` defaults to 1 (infer_state.py line 151): every KV head of a layer shares one selection;
- pages that must be on the GPU each step: `page_topks`, default budget // 2 sink and window included
  (infer_state.py line 64), top-k of the estimates (source/arkvale_cpp/src/select.cu, SelectTopkKernel,
  line 75); the ones not cached are recalled from the host before attention (infer_state.py `recall`,
  line 405; at most top-k pages per step), each over the cached page with the lowest estimate (select.cu
  line 132: a bottom-k over the cache); the evicted page's host copy stays;
- attention over the whole GPU cache (budget pages), not only the top-k: modeling.py line 163
  (`use_sparse_attn` off, `decode_sdpa` over `kvc.c2p`);
- prefill: the cache keeps the top budget - sink - window pages under the last prompt query
  (infer_state.py `prefill_evict_extra_pages`, line 484), every page backed up on the host.

Runtime policy (freekv_runtime.policies._sync_retrieval on the paged-retrieval mechanism,
_paged_retrieval: PagedKVStore / RecallEngine / plan_reuse): the slot cache of `selected_pages` per KV head
plus sink and window is the GPU cache of `budget_tokens`; each step the `top_pages` best candidate pages
are made resident (synchronous recall, all heads `corrected`, similarity NaN), the lowest-scoring resident
pages outside them are evicted, and attention reads sink + every resident slot + window. ArkVale's hooks:
`page_scores` pools the group-pooled scores again over the KV heads of a selection group, and
`step_selection` keeps the `top_pages` best.

Knobs. The retrieval knobs: budget_tokens (the GPU cache, sink and window included), page_size,
sink_tokens, window_tokens, dense_layers (FreeKV paper baseline: budget 2048, page 32, layer 0 dense;
ArkVale's LongBench script: 128 pages of 32, 1 sink and 2 window pages, 2 dense layers). `config.knobs`
(traces.catalogue.retrieval.ArkValeKnobs): group_pooling (default mean of raw scores, ArkVale's; max /
softmax_mean / softmax_scaled_mean possible) and page_summary (default box, ArkVale's digests; minmax
possible);
- top_pages: candidate pages made resident per step, 1..selected_pages; default (null) selected_pages // 2
  (at least 1), ArkVale's page_topks = budget // 2 applied to the slots outside sink and window;
- selection_groups: groups of KV heads sharing one selection, a divisor of the KV heads; default 1
  (ArkVale's n_groups: one selection per layer);
- staging_pages, pool_chunk_pages: FreeKV's recall staging and host-pool growth.

Differences from the public code: ArkVale's top-k counts its sink and window pages (here they are
separate, so `top_pages` counts candidates only); its window is a ring of `n_win_pages` inside the cache
(kv_cache.py line 164), here RuntimeConfig's window; its optional cross-layer prefetch
(`n_prefetch_layers`, off by default) is not modelled.
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies._paged_retrieval import PagedRetrievalPolicy
from freekv_runtime.policies._sync_retrieval import SynchronousRetrievalState
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.timing import OpTimer

__all__ = ["ArkValePolicy", "ArkValeState"]


class ArkValeState(SynchronousRetrievalState):
    """`selection_groups` groups of KV heads each share one selection of `top_pages` pages.

    heads_per_selection: KV heads sharing one selection (1 = each KV head its own); their page scores are
    pooled with `config.knobs.group_pooling` (max -> max, otherwise the mean). top_pages: pages made
    resident per decode step."""

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        knobs = config.knobs
        groups = knobs.selection_groups
        if shape.n_kv_heads % groups:
            raise RuntimeConfigError(f"arkvale knob selection_groups must divide the model's "
                                     f"{shape.n_kv_heads} KV heads, got {groups}")
        super().__init__(config, shape, batch_size, device, dtype, timer)
        self.heads_per_selection = shape.n_kv_heads // groups
        default_top = max(1, config.selected_pages // 2)  # ArkVale's page_topks = budget // 2
        self.top_pages = knobs.top_pages if knobs.top_pages is not None else default_top

    def page_scores(self, store: PagedKVStore, q: torch.Tensor, hi: int) -> torch.Tensor:
        """The mechanism's scores (b, Hkv, hi), pooled over each selection group's KV heads and repeated
        to every head of the group."""
        scores = super().page_scores(store, q, hi)
        g = self.heads_per_selection
        if g == 1:
            return scores
        b, hkv, n_pages = scores.shape
        grouped = scores.view(b, hkv // g, g, n_pages)
        pooled = grouped.amax(dim=2) if self.config.knobs.group_pooling == "max" else grouped.mean(dim=2)
        return pooled.repeat_interleave(g, dim=1)

    def step_selection(self, top: np.ndarray) -> np.ndarray:
        """The `top_pages` best of top (b, Hkv, k) -> (b, Hkv, min(k, top_pages))."""
        return top[:, :, : self.top_pages]


class ArkValePolicy(PagedRetrievalPolicy):
    state_class = ArkValeState
