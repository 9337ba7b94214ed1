"""Dropping methods: a token a head evicts is gone for good; everything kept lives on the GPU.

StreamingLLM (sink + recent), H2O (accumulated attention), SnapKV (prompt votes at prefill), RaaS
(page timestamps) and RazorAttention (retrieval heads keep everything, the others sink + window + one
compensation token). Their simulator models share `group_consistent`: one kept set per KV head (the
runtime policies' choice) or one per query head; SnapKV's `selection` (runtime and simulator) makes that
choice for both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.catalogue.entry import MethodEntry
from traces.catalogue.knobs import MethodKnobs, SelectionKnobs, knob

__all__ = ["ENTRIES", "DroppingKnobs", "StreamingLLMKnobs", "H2OKnobs", "SnapKVKnobs", "RaaSKnobs",
           "TOVAKnobs", "RazorAttentionKnobs", "PyramidKVKnobs",
           "DuoAttentionKnobs", "CAKEKnobs", "LazyEvictionKnobs", "LAZY_BUDGET_RULES"]

_GROUP_DOC = ("one kept set per KV head (the runtime policy's choice) instead of one per query "
              "head (G times the memory and attention traffic of a GQA group)")


@dataclass(frozen=True)
class DroppingKnobs(MethodKnobs):
    group_consistent: bool = knob(True, _GROUP_DOC, side="simulator")


@dataclass(frozen=True)
class StreamingLLMKnobs(DroppingKnobs):
    """StreamingLLM: the budget is sink + recent tokens; nothing else to choose."""


@dataclass(frozen=True)
class H2OKnobs(DroppingKnobs):
    """H2O: heavy hitters = budget - sink - window tokens of highest accumulated attention."""

    normalise: bool = knob(False, "divide each token's summed attention by the queries that saw it "
                           "(kvpress observed_attention_press.py:44-48); false: the sum, as H2O's code "
                           "(modify_llama.py:317-326)")


@dataclass(frozen=True)
class SnapKVKnobs(SelectionKnobs):
    """selection per-query-head: SnapKV's code (K/V repeated to every query head before the vote,
    llama_hijack_4_37.py:75-77; votes and top-k per query head, snapkv_utils.py:45-62); per-kv-head:
    the group's votes pooled (NVIDIA/kvpress snapkv_press.py:99-100 averages them)."""

    observation_tokens: int = knob(64, "prompt queries that vote (SnapKV's window_size)", side="both", low=1)
    kernel_size: int = knob(5, "tokens pooled around each vote (SnapKV's kernel_size)", low=1, odd=True)
    pooling: str = knob("avg", "pooling of the votes along the tokens", choices=("avg", "max"))


@dataclass(frozen=True)
class RaaSKnobs(DroppingKnobs):
    alpha: float = knob(1e-4, "attention a page needs to be stamped important (FreeKV harness "
                        "accuracy/eval/util.py:70)", low=0.0, high=1.0, low_open=True, high_open=True)
    group: str = knob("mean", "pooling of a page's importance over the group's query heads (mean: the "
                      "FreeKV harness, dynamic_attention.py:481; max: the FreeKV paper's setup)",
                      choices=("max", "mean"))
    prompt: str = knob("keep", "keep: every prompt token kept, the budget bounds decoded tokens (the RaaS "
                       "paper); harness: the budget covers the prompt, cut to the pages the last prompt "
                       "query ranks first (FreeKV's harness)", side="both", choices=("keep", "harness"))


@dataclass(frozen=True)
class TOVAKnobs(DroppingKnobs):
    """TOVA: the budget is the multi-state size; page 1, sink 0, window 1 is TOVA as published."""


@dataclass(frozen=True)
class RazorAttentionKnobs(MethodKnobs):
    induction_fraction: float = knob(0.14, "share of query heads kept as induction (retrieval) heads",
                                     low=0.0, high=1.0)
    echo_fraction: float = knob(0.01, "share of query heads kept as echo (retrieval) heads",
                                low=0.0, high=1.0)
    probe_tokens: int = knob(256, "the probe's random segment length", low=2)
    probe_repeats: int = knob(4, "times the probe segment is repeated", low=2)
    probe_seed: int = knob(0, "seed of the probe tokens", low=0)
    compensation: str = knob("count", "the compensation token in the softmax: weighted by the tokens it "
                             "stands for (count), as one token (single), or dropped (none)",
                             side="both", choices=("count", "single", "none"))
    gqa_heads: str = knob("kv", "retrieval heads under GQA: kv ranks KV heads by their group's best query "
                          "head, so the fractions are shares of KV heads (the paper's ~15% kept whole); "
                          "any_query marks a KV head if any of its query heads ranks (up to G times more)",
                          choices=("kv", "any_query"))
    window_rule: str = knob("paper", "recent tokens of a non-retrieval head: paper max(S0, ceil(N/C)) "
                            "(Algorithm 1; S0 = budget - sink - 1); budget: S0 alone",
                            side="both", choices=("paper", "budget"))
    compression_ratio: float = knob(5.0, "C in max(S0, N/C) (estimate: 15% whole heads + 85% at N/5 keep "
                                    "~32% of the cache, the paper's ~70% reduction)", side="both", low=1.0)
    retrieval_fraction: float | None = knob(
        None, "share of KV heads kept whole; null: the trace's measured probe, else the paper's "
        "0.15", side="simulator", kind=float, low=0.0, high=1.0)


@dataclass(frozen=True)
class PyramidKVKnobs(DroppingKnobs):
    observation_tokens: int = knob(8, "prompt queries that vote (PyramidKV's window_size; 8 in its LongBench "
                                   "runs)", side="both", low=1)
    kernel_size: int = knob(7, "tokens pooled around each vote (PyramidKV's kernel_size)", low=1, odd=True)
    pooling: str = knob("max", "pooling of the votes along the tokens", choices=("avg", "max"))
    beta: int = knob(20, "the last layer selects (budget - observation) // beta tokens, the first twice the "
                     "budget less that (PyramidKV's beta)", side="both", low=1)


@dataclass(frozen=True)
class DuoAttentionKnobs(MethodKnobs):
    sparsity: float = knob(0.5, "share of KV heads (over all layers) that stream: sink + recent only "
                           "(DuoAttention's sparsity)", side="both", low=0.0, high=1.0)
    head_split: str = knob("trained", "where the head split comes from: trained (DuoAttention's gate "
                           "optimisation: the pattern knob, else the pattern shipped for this model, "
                           "python -m freekv_runtime.duo_train trains one) or probe (a one-shot deviation "
                           "probe, a proxy of the optimisation)", choices=("trained", "probe"))
    pattern: str | None = knob(None, "a DuoAttention pattern, full_attention_heads.tsv (layers x KV heads of "
                               "gate values: released, or written by freekv_runtime.duo_train); null: the "
                               "pattern shipped for the model (head_split trained)", kind=str)
    probe_tokens: int = knob(256, "the probe's random segment length, at least the budget (head_split "
                             "probe)", low=2)
    probe_repeats: int = knob(2, "times the probe segment is repeated", low=2)
    probe_seed: int = knob(0, "seed of the probe tokens", low=0)


@dataclass(frozen=True)
class CAKEKnobs(MethodKnobs):
    observation_tokens: int = knob(32, "prompt queries whose attention measures each layer and token (CAKE's "
                                   "window_size)", side="both", low=1)
    tau1: float = knob(1.0, "temperature of the dispersion (entropy) in a layer's preference H^(1/tau1) "
                       "V^(1/tau2)", low=0.0, low_open=True)
    tau2: float = knob(1.0, "temperature of the shift (variance) in a layer's preference", low=0.0,
                       low_open=True)
    gamma: float = knob(200.0, "weight of the attention variance in the eviction indicator mean + gamma var",
                        low=0.0)


LAZY_BUDGET_RULES = ("peak", "published")


@dataclass(frozen=True)
class LazyEvictionKnobs(SelectionKnobs):
    """LazyEviction: every W = window_tokens decode steps, keep the W newest tokens and the top tokens by
    recurrence (a token's last step with attention >= alpha and its maximum recurrence interval);
    selection per-query-head is its code's (K/V repeated to every query head before caching,
    Halo-949/LazyEviction model/llama_model.py:64-65)."""

    alpha: float = knob(1e-4, "attention a token needs at a step to count as recurring then (LazyEviction's "
                        "--alpha: 1e-4 in eval_qwen.sh and evaluation.py:174, 5e-4 in eval_llama.sh)",
                        low=0.0, high=1.0, low_open=True, high_open=True)
    budget_rule: str = knob("peak", "peak: a head attends at most budget_tokens after the first step (the "
                            "code's max_kv_capacity = budget - window; a prompt over the budget is evicted "
                            "after step 1); published: max_kv_capacity = budget, as the code names it (up to "
                            "budget + window between evictions, the whole prompt until step W)",
                            side="both", choices=LAZY_BUDGET_RULES)

    def check_retrieval(self, retrieval: Any) -> str | None:
        r = retrieval
        peak = self.budget_rule == "peak"
        least = r.sink_tokens + r.window_tokens * (2 if peak else 1) + r.page_size
        if r.budget_tokens < least:
            held = "sink + 2 x window + page_size (the W newest tokens kept at each eviction and W more " \
                "appended before the next)" if peak else "sink + window + page_size"
            return (f"budget_rule={self.budget_rule}: budget_tokens={r.budget_tokens} must hold {held} = "
                    f"{least}, W = window_tokens; lower window_tokens or raise budget_tokens")
        return None


_DROP, _M = "freekv_runtime.policies.", "sim.methods."
ENTRIES = (
    MethodEntry("streamingllm", "dropping", "sink + most recent tokens (attention sinks)", StreamingLLMKnobs,
                policy=_DROP + "streamingllm:StreamingLLMPolicy", model=_M + "streamingllm:StreamingLLM",
                source="Xiao et al., StreamingLLM (ICLR 2024, arXiv 2309.17453); mit-han-lab/streaming-llm"),
    MethodEntry("h2o", "dropping", "heavy hitters by accumulated attention + recent tokens", H2OKnobs,
                policy=_DROP + "h2o:H2OPolicy", model=_M + "h2o:H2O",
                source="Zhang et al., H2O (NeurIPS 2023, arXiv 2306.14048); FMInference/H2O"),
    MethodEntry("snapkv", "dropping", "prompt tokens voted once at prefill by the last prompt queries",
                SnapKVKnobs, policy=_DROP + "snapkv:SnapKVPolicy", model=_M + "snapkv:SnapKV",
                source="Li et al., SnapKV (NeurIPS 2024, arXiv 2404.14469); FasterDecoding/SnapKV"),
    MethodEntry("raas", "dropping", "prompt kept; decoded pages stamped when important, the stalest dropped",
                RaaSKnobs,
                policy=_DROP + "raas:RaaSPolicy", model=_M + "raas:RaaS",
                source="Hu et al., RaaS (arXiv 2502.11147); rooikeee/FreeKV accuracy harness"),
    MethodEntry("tova", "dropping", "the token the current query attends least dropped each step (heads "
                "averaged, one set per layer)", TOVAKnobs, policy=_DROP + "tova:TOVAPolicy",
                model=_M + "tova:TOVA",
                source="Oren et al., Transformers are Multi-State RNNs (arXiv 2401.06104); "
                "schwartz-lab-NLP/TOVA"),
    MethodEntry("razorattention", "dropping", "retrieval heads keep all, others sink + window + a "
                "compensation token", RazorAttentionKnobs,
                policy=_DROP + "razorattention:RazorAttentionPolicy",
                model=_M + "razorattention:RazorAttention",
                source="Tang et al., RazorAttention (ICLR 2025, arXiv 2407.15891); no public code"),
    MethodEntry("pyramidkv", "dropping", "SnapKV's prompt votes with layer budgets decreasing with depth "
                "(a pyramid over the same total)", PyramidKVKnobs,
                policy=_DROP + "pyramidkv:PyramidKVPolicy", model=_M + "pyramidkv:PyramidKV",
                source="Cai et al., PyramidKV (arXiv 2406.02069); Zefan-Cai/PyramidKV"),
    MethodEntry("duoattention", "dropping", "retrieval heads keep everything, streaming heads sink + recent "
                "(head split from trained gates: shipped for smollm2-135m or a given pattern; a probe on "
                "request)", DuoAttentionKnobs,
                policy=_DROP + "duoattention:DuoAttentionPolicy", model=_M + "duoattention:DuoAttention",
                source="Xiao et al., DuoAttention (ICLR 2025, arXiv 2410.10819); mit-han-lab/duo-attention"),
    MethodEntry("cake", "dropping", "layer budgets from each layer's attention dispersion and shift, tokens "
                "by mean + variance of their attention", CAKEKnobs, policy=_DROP + "cake:CAKEPolicy",
                model=_M + "cake:CAKE",
                source="Qin et al., CAKE (ICLR 2025, arXiv 2503.12491); antgroup/cakekv, read at its copy "
                "qtris123/cakekv"),
    MethodEntry("lazyeviction", "dropping", "lagged eviction every W steps: the W newest tokens and the "
                "tokens whose attention recurs within their maximum recurrence interval", LazyEvictionKnobs,
                policy=_DROP + "lazyeviction:LazyEvictionPolicy", model=_M + "lazyeviction:LazyEviction",
                source="Zhang et al., LazyEviction (arXiv 2506.15969); Halo-949/LazyEviction, read at its "
                "copy WeianMao/triattention e7a0eb1 LazyEviction/"),
)
