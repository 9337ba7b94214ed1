"""Retrieval methods: the whole KV stays reachable on the host, a budget of it is attended each step.

FreeKV (and its simulator-only ablations), Quest and ArkVale select pages from per-page key summaries;
ShadowKV keeps low-rank keys on the device and fetches values of selected chunks; InfiniGen speculates
the next layer's tokens from partial projections. Knob docs cite the public code; each policy's and
model's docstring has the full account.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.catalogue.entry import MethodEntry
from traces.catalogue.knobs import SELECTIONS, KnobError, MethodKnobs, SelectionKnobs, knob

__all__ = ["ENTRIES", "GROUP_POOLINGS", "PAGE_SUMMARIES", "PageRetrievalKnobs", "FreeKVKnobs", "QuestKnobs",
           "ArkValeKnobs", "ShadowKVKnobs", "InfiniGenKnobs", "ClusterKVKnobs", "SHADOWKV_RANK_SHARE",
           "shadowkv_rank"]

# kernels.page_scores.POOLINGS / kernels.summarize_pages.SUMMARIES (tests check they agree)
GROUP_POOLINGS = ("softmax_mean", "softmax_scaled_mean", "mean", "max")
PAGE_SUMMARIES = ("minmax", "box")
_POOLING_DOC = ("how a GQA group's page scores are pooled: softmax_mean (FreeKV's accuracy harness, avgSM), "
                "softmax_scaled_mean (1/sqrt(d) inside the softmax), mean (raw scores: FreeKV's runtime, "
                "ArkVale), max (the FreeKV paper's Quest baseline)")
_SUMMARY_DOC = ("per-page key summary: minmax (Quest, FreeKV's harness) or box (centre +- mean radius: "
                "ArkVale)")


@dataclass(frozen=True)
class PageRetrievalKnobs(MethodKnobs):
    """Knobs of the page-retrieval mechanism FreeKV, Quest and ArkVale share (paged store, recall)."""

    group_pooling: str = knob("softmax_mean", _POOLING_DOC, choices=GROUP_POOLINGS)
    page_summary: str = knob("minmax", _SUMMARY_DOC, choices=PAGE_SUMMARIES)
    staging_pages: int = knob(
        0, "head-pages per recall staging buffer (two buffers per recall stream); 0: one head's selected "
        "pages, the simulator's model choice, so the runtime runs what the simulator prices", side="both",
        low=0)
    pool_chunk_pages: int = knob(64, "host KV pool growth step, pages", low=1)


@dataclass(frozen=True)
class FreeKVKnobs(PageRetrievalKnobs):
    tau: float = knob(0.9, "correction threshold: a KV head whose group-mean cos(q_t, q_t-1) < tau is "
                      "selected and recalled synchronously (paper: 0.8 long input, 0.9 long generation; 1 "
                      "corrects every head whose query moved, -1 none)", low=-1.0, high=1.0)


@dataclass(frozen=True)
class QuestKnobs(PageRetrievalKnobs, SelectionKnobs):
    group_pooling: str = knob("max", _POOLING_DOC + "; only with selection per-kv-head",
                              choices=GROUP_POOLINGS)
    staging_pages: int = knob(0, "head-pages per recall staging buffer (two buffers per recall stream); "
                              "0: one head's selected pages", low=0)
    selection: str = knob(
        "per-query-head", "per-query-head: every query head scores the pages and takes its own top-k "
        "(Quest's code, evaluation/quest_attention.py:139-146, 211-215); per-kv-head: the group's scores "
        "pooled by group_pooling into one set per KV head (the FreeKV paper's Quest baseline)", side="both",
        choices=SELECTIONS)
    offload: bool = knob(False, "the KV of sparse layers on the host, selected pages recalled "
                         "(not in Quest's code, which keeps all KV on the GPU)", side="simulator")


@dataclass(frozen=True)
class ArkValeKnobs(PageRetrievalKnobs):
    group_pooling: str = knob("mean", _POOLING_DOC, choices=GROUP_POOLINGS)
    page_summary: str = knob("box", _SUMMARY_DOC, choices=PAGE_SUMMARIES)
    staging_pages: int = knob(0, "head-pages per recall staging buffer (two buffers per recall stream); "
                              "0: one head's selected pages", low=0)
    top_pages: int | None = knob(None, "candidate pages made resident per step, 1..selected pages; null: "
                                 "selected pages // 2 (ArkVale's page_topks = budget // 2, "
                                 "infer_state.py:64)",
                                 kind=int, low=1)
    selection_groups: int = knob(1, "groups of KV heads sharing one selection (a divisor of the model's KV "
                                 "heads; ArkVale's n_groups, default 1: one selection per layer)", low=1)
    group_heads: int = knob(1, "KV heads per recall group (1: the FreeKV paper's ArkVale "
                            "baseline; the model's KV heads: ArkVale's own one page set)", side="simulator",
                            low=1)
    issue_overhead_s: float = knob(0.0, "host seconds per recall copy beyond the driver's cost "
                                   "(ideal mode)", side="simulator", low=0.0)

    def check_retrieval(self, retrieval: Any) -> str | None:
        slots = retrieval.selected_pages
        if self.top_pages is not None and self.top_pages > slots:
            return (f"top_pages must be an integer in 1..{slots} (the budget's selected-page slots), "
                    f"got {self.top_pages}")
        return None


# ShadowKV keeps rank 160 of the (tokens, Hkv*d) = (T, 8*128) key matrix of Llama-3-8B
# (bytedance/ShadowKV models/llama.py:86, models/kv_cache.py:212): the same share of any model's key width
SHADOWKV_RANK_SHARE = 160 / 1024


def shadowkv_rank(rank: int | None, n_kv_heads: int, head_dim: int) -> int:
    """The SVD rank ShadowKV keeps: `rank` when given, else round(160/1024 * Hkv * d), at least 1."""
    if rank is not None:
        return rank
    return max(1, round(SHADOWKV_RANK_SHARE * n_kv_heads * head_dim))


@dataclass(frozen=True)
class ShadowKVKnobs(MethodKnobs):
    rank: int | None = knob(None, "SVD rank of the pre-RoPE keys; null: ShadowKV's share of the key "
                            "width, 160 of Hkv*d = 1024 on Llama-3-8B (llama.py:86), scaled to the model",
                            side="both", kind=int, low=1)
    outlier_chunks: int | None = knob(None, "outlier chunks per KV head; null: 3/16 of the selectable tokens "
                                      "in chunks (ShadowKV_CPU's share, kv_cache.py:398)", kind=int, low=0)
    refactor_interval: int | None = knob(None, "decode steps between re-factorisations; null: window_tokens "
                                         "(the FreeKV paper's baseline)", kind=int, low=1)
    chunk_tokens: int = knob(8, "tokens per landmark chunk (ShadowKV's chunk_size)",
                             side="simulator", low=1)
    svd_interval_tokens: int = knob(0, "generated tokens between SVDs (0: never)",
                                    side="simulator", low=0)
    svd_every_window: bool = knob(False, "re-run the SVD every window of generated tokens (the "
                                  "FreeKV paper's setting)", side="simulator")
    svd_flops_fraction: float = knob(0.01, "share of the FP16 tensor peak the fp32 SVD reaches (estimate; "
                                     "at most the FP32 CUDA-core share, 0.0625 on an A100)",
                                     side="simulator", low=0.0, high=1.0, low_open=True)
    uva_rate_fraction: float = knob(1.0, "share of the link's DMA rate the zero-copy value gather reaches "
                                    "(as published; estimate)", side="simulator", low=0.0, high=1.0,
                                    low_open=True)
    uva_read_latency_s: float = knob(2.0e-6, "round trip of one SM read of pinned host memory over the link: "
                                     "the value gather keeps one 2 KiB chunk in flight per block (as "
                                     "published; estimate)", side="simulator", low=0.0, low_open=True)
    device_load_latency_s: float = knob(5.0e-7, "one dependent device-memory load with its shared-memory "
                                        "steps, the pace of ShadowKV's one-chunk-in-flight copy loops and "
                                        "of gatherTopK (as published; estimate)", side="simulator", low=0.0,
                                        low_open=True)
    l2_load_latency_s: float = knob(1.6e-7, "one global load that hits L2, the pace of the softmax final "
                                    "reduction's per-thread walk over the partials of selection (as "
                                    "published; estimate)", side="simulator", low=0.0, low_open=True)
    smem_step_latency_s: float = knob(4.0e-8, "one barrier-separated or dependent shared-memory step, the "
                                      "pace of the top-k results' sort and of the offsets' reorder and "
                                      "bitonic sorts (as published; estimate)", side="simulator", low=0.0,
                                      low_open=True)
    l2_bandwidth_gbps: float = knob(3600.0, "L2 rate of the softmax apply kernel's repeated walks over "
                                    "each score row, GB/s (as published; estimate)", side="simulator",
                                    low=0.0, low_open=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.svd_every_window and self.svd_interval_tokens:
            raise KnobError("svd_every_window and svd_interval_tokens exclude each other: give one")

    def check_retrieval(self, retrieval: Any) -> str | None:
        r = retrieval
        interval = self.refactor_interval or r.window_tokens
        exact_max = r.sink_tokens + r.window_tokens + max(interval, r.page_size)
        if exact_max > r.budget_tokens:
            return (f"refactor_interval: budget_tokens={r.budget_tokens} must hold sink + window + "
                    f"max(refactor_interval, page_size) = {exact_max} exact tokens (the recent window grows "
                    f"between re-factorisations); lower refactor_interval or raise budget_tokens")
        return None


@dataclass(frozen=True)
class InfiniGenKnobs(SelectionKnobs):
    partial_ratio: float = knob(0.2, "share of a head's skewed query/key columns used for speculation",
                                side="both", low=0.0, high=1.0, low_open=True)
    alpha: float = knob(5.0, "logit margin below the maximum that selects a token", low=0.0, low_open=True)
    calib_tokens: int = knob(512, "calibration prompt tokens (the skew matrices)", low=16)
    calib_seed: int = knob(0, "calibration prompt seed", low=0)
    gather: str = knob("cpu", "the host gathers speculated tokens into a pinned buffer (cpu, "
                       "InfiniGen's code) or the copy engine gathers scattered rows (dma)", side="simulator",
                       choices=("cpu", "dma"))
    cpu_gather_fraction: float = knob(0.3, "share of host DRAM bandwidth the CPU gather reaches "
                                      "(estimate; ideal mode: as published the software profile's "
                                      "torch_gather_row_s prices it)", side="simulator", low=0.0, high=1.0,
                                      low_open=True)
    run_bytes: int = knob(0, "bytes per contiguous run of a DMA gather (0: one token's K or V "
                          "of one head)", side="simulator", low=0)
    dense_layer_1: bool = knob(True, "layer 1 attends densely as in InfiniGen's code (speculation starts at "
                               "layer 2: accuracy/src/modeling_llama_ours.py:703-704, speedup/flexgen/"
                               "infinigen/flex_opt.py:287); false: layer 1 speculated from layer 0's input",
                               side="both")
    fetch_fraction: float | None = knob(
        None, "cap on the tokens fetched per head as a share of the context (InfiniGen's accuracy code: "
        "int(0.2 x context), modeling_llama_ours.py:194, 226); null: budget - sink - window (this "
        "project's equal-budget convention)", kind=float, low=0.0, high=1.0, low_open=True)


@dataclass(frozen=True)
class ClusterKVKnobs(PageRetrievalKnobs):
    group_pooling: str = knob("mean", "how a GQA group's cluster scores are pooled: mean (ClusterKV's "
                              "gqa_policy qavg, the query averaged) or max", choices=("mean", "max"))
    clusters: int = knob(400, "k-means clusters of a KV head's prompt keys after the sink (ClusterKV's "
                         "nlist; at most the tokens clustered)", side="both", low=1)
    iterations: int = knob(20, "k-means iterations (ClusterKV's fit_iter)", side="both", low=1)


_FREEKV = "Liu et al., FreeKV (ICLR 2026, arXiv 2505.13109); rooikeee/FreeKV"
_P, _M = "freekv_runtime.policies.", "sim.methods."

ENTRIES = (
    MethodEntry("freekv", "retrieval", "speculative page retrieval + fine-grained correction, hybrid "
                "layouts, double-buffered recall", FreeKVKnobs,
                policy=_P + "freekv:FreeKVPolicy", model=_M + "freekv:FreeKV",
                bare_param_names=True, source=_FREEKV),
    MethodEntry("freekv-nohl", "retrieval", "FreeKV without hybrid layouts (NHD fragmented recall)",
                FreeKVKnobs, model=_M + "freekv:FreeKVNoHybridLayout", trace_of="freekv",
                source=_FREEKV + " (ablation)"),
    MethodEntry("freekv-nodb", "retrieval", "FreeKV without double-buffered streamed recall", FreeKVKnobs,
                model=_M + "freekv:FreeKVNoDoubleBuffer", trace_of="freekv", source=_FREEKV + " (ablation)"),
    MethodEntry("freekv-nosr", "retrieval", "FreeKV without speculative retrieval", FreeKVKnobs,
                model=_M + "freekv:FreeKVNoSpeculation", trace_of="freekv", source=_FREEKV + " (ablation)"),
    MethodEntry("freekv-base", "retrieval", "page retrieval without hybrid layouts, double buffering or "
                "speculation (the ablation's start)", FreeKVKnobs, model=_M + "freekv:FreeKVBase",
                trace_of="freekv", source=_FREEKV + " (ablation)"),
    MethodEntry("quest", "retrieval", "min/max page scores with the current query every step, top-k pages",
                QuestKnobs, policy=_P + "quest:QuestPolicy", model=_M + "quest:Quest",
                source="Tang et al., Quest (ICML 2024, arXiv 2406.10774); mit-han-lab/Quest"),
    MethodEntry("arkvale", "retrieval", "page digests scored every step, a GPU page cache, blocking recall "
                "of misses", ArkValeKnobs, policy=_P + "arkvale:ArkValePolicy",
                model=_M + "arkvale:ArkVale",
                source="Chen et al., ArkVale (NeurIPS 2024); pku-liang/ArkVale"),
    MethodEntry("shadowkv", "retrieval", "low-rank pre-RoPE keys on the GPU, values of selected chunks "
                "fetched from the host", ShadowKVKnobs, policy=_P + "shadowkv:ShadowKVPolicy",
                model=_M + "shadowkv:ShadowKV", moved_parts=("V",),
                source="Sun et al., ShadowKV (ICML 2025, arXiv 2410.21465); bytedance/ShadowKV"),
    MethodEntry("infinigen", "retrieval", "next layer's tokens speculated from partial projections and "
                "prefetched from the host", InfiniGenKnobs,
                policy=_P + "infinigen:InfiniGenPolicy", model=_M + "infinigen:InfiniGen",
                source="Lee et al., InfiniGen (OSDI 2024); snu-comparch/InfiniGen"),
    MethodEntry("clusterkv", "retrieval", "prompt keys clustered by cosine k-means; the clusters whose "
                "centroids score highest are recalled from the host", ClusterKVKnobs,
                policy=_P + "clusterkv:ClusterKVPolicy", model=_M + "clusterkv:ClusterKV",
                source="Liu et al., ClusterKV (DAC 2025, arXiv 2412.03213); sjtu-zhao-lab/ClusterKV"),
)
