"""Quest: query-aware top-k pages from per-page min/max keys, selected with the current query every step.

Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference" (ICML 2024,
arXiv 2406.10774); public code mit-han-lab/Quest: evaluation/quest_attention.py (the accuracy harness:
per chunk the upper bound sum_i max(q_i * max_k_i, q_i * min_k_i), written with sign(q), lines 146-183;
top max(3, token_budget // chunk_size) chunks per query head at every decode step, lines 23-64; layers
0 and 1 dense, line 84), quest/utils/controller.py and quest/models/QuestAttention.py (the kernel path:
metadata = per-page min/max keys, estimate -> top-k -> sparse attention every step).

Runtime policy (freekv_runtime.policies._sync_retrieval on the paged-retrieval mechanism,
_paged_retrieval): the retrieval setting this project compares (the whole KV on the host, the GPU holds
the selected pages): at every decode step of a sparse layer the top pages under the current query are
chosen among the candidates, the ones not resident are recalled synchronously before attention (every
head `corrected`, similarity NaN), and attention runs over sink + selected + window. A budget covering
the context attends everything (dense). Quest's hooks are the mechanism's defaults: `page_scores` over
the summaries with `group_pooling`, `step_selection` every slot.

Knobs: the retrieval knobs (RuntimeConfig: budget_tokens, sink and window included; selected pages per
KV head = (budget - sink - window) / page_size; page_size, sink_tokens, window_tokens, dense_layers; the
FreeKV paper's baseline setting: budget 2048, page 32, layer 0 dense) and `config.knobs`
(traces.catalogue.retrieval.QuestKnobs): group_pooling (default max: a GQA group's query heads are pooled
by the max of their page scores, so the group shares one selection, as the FreeKV paper's Quest baseline
does; Quest's own harness selects per query head), page_summary (default minmax, Quest's; box possible),
staging_pages and pool_chunk_pages (FreeKV's recall staging and host-pool growth).

Differences from the public code: Quest keeps the whole KV on the GPU and only reads less; here pages
not resident are copied from the host first (the retrieval setting the issue compares). Quest's sink and
local window are not separate (its top-k includes the current chunk); here they are RuntimeConfig's.
"""

from __future__ import annotations

from freekv_runtime.policies._paged_retrieval import PagedRetrievalPolicy
from freekv_runtime.policies._sync_retrieval import SynchronousRetrievalState

__all__ = ["QuestPolicy", "QuestState"]


class QuestState(SynchronousRetrievalState):
    """selection per-query-head (default, Quest's code): every query head takes its own top pages and
    attends them, its KV head holding the group's union; per-kv-head: every KV head selects one set (the
    group pooled by `config.knobs.group_pooling`), top-k = every slot. Both are the mechanism's."""

    selects_per_query_head = True


class QuestPolicy(PagedRetrievalPolicy):
    state_class = QuestState
