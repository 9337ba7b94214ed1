"""Multi-context methods: documents prefilled independently (a document KV cache each), joined at query
time, a subset of tokens recomputed layer by layer, a subset kept.

RAG serving stores each retrieved document's KV cache once and reuses it across requests; prefilled
alone, a document's cache lacks the attention to the documents before it. The five methods share one
runtime mechanism (freekv_runtime/policies/_multi_context.py: join the caches, recompute a per-layer
token set, keep a per-layer token set) and one simulator model skeleton (sim/methods/multi_context.py:
document caches fetched from host memory on a hit, recompute priced as prefill of the recomputed tokens);
they differ in which tokens they recompute and keep:

- rag-no-recompute: the caches joined as stored, only the user query prefilled over them (SamKV's
  "Reuse" baseline);
- rag-full-recompute: every token recomputed at every layer (joint prefill: SamKV's "Recompute");
- cacheblend: the tokens whose values deviate most at a check layer (YaoJiayi/CacheBlend);
- epic: the first tokens of each document (LegoLink, DerekHJH/epic);
- samkv: initial + local blocks kept and recomputed, middle blocks selected by dynamic top-p around
  anchors with a personalised query (Eq. 1-3 of the SamKV paper), high-attention tokens recomputed.

`hit_rate` (every method, simulator): share of a request's documents found in the document cache; a
missed document is prefilled (and stored) instead of fetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.catalogue.entry import MethodEntry
from traces.catalogue.knobs import MethodKnobs, knob

__all__ = ["ENTRIES", "MultiContextKnobs", "CacheBlendKnobs", "EpicKnobs", "SamKVKnobs", "MULTI_CONTEXT"]

MULTI_CONTEXT = "multi-context"
_P = "freekv_runtime.policies."
_M = "sim.methods."


@dataclass(frozen=True)
class MultiContextKnobs(MethodKnobs):
    hit_rate: float = knob(1.0, "share of a request's documents whose KV cache is in the document cache "
                           "(host memory); a miss is prefilled instead of fetched", side="simulator",
                           low=0.0, high=1.0)
    documents: int = knob(4, "documents per request when no trace of the method says (a trace gives its own)",
                          side="simulator", low=1)


@dataclass(frozen=True)
class CacheBlendKnobs(MultiContextKnobs):
    """CacheBlend as its code runs: every token recomputed up to the check layer, then the top
    recompute_ratio of the non-query tokens by value deviation (vllm_blend xformers.py:209-217)."""

    recompute_ratio: float = knob(0.18, "share of the non-query tokens recomputed after the check layer "
                                  "(example/blend_wikimqa.py:107 and blend_samsum.py:108: 0.18; "
                                  "vllm_blend llama.py:303: 0.16)",
                                  side="both", low=0.0, high=1.0)
    check_layer: int = knob(1, "layer whose value deviation selects the tokens (llama.py:300 "
                            "check_layers [1]); it and the layers before it recompute every token", low=0)
    ratio_decay: float = knob(1.0, "after the check layer each layer keeps recompute_ratio x decay^k of the "
                              "tokens, re-selected by its own deviation among the previous set (the "
                              "paper's gradual filtering); 1.0: one selection, as the public code",
                              side="both", low=0.0, high=1.0, low_open=True)


@dataclass(frozen=True)
class EpicKnobs(MultiContextKnobs):
    """EPIC's LegoLink (kvlink-N in its code): the first link_tokens of every document recomputed."""

    link_tokens: int = knob(16, "initial tokens of each document recomputed at every layer "
                            "(benchmarks_ours/evals/e2e/main.py:202-217; kvlink-16 is the long_context "
                            "default)",
                            side="both", low=0)


@dataclass(frozen=True)
class SamKVKnobs(MultiContextKnobs):
    """SamKV (paper section 3; no public code): block size 64, 1 initial and 2 local blocks (section 4)."""

    block_tokens: int = knob(64, "tokens per block (section 4: 64)", side="both", low=1)
    initial_blocks: int = knob(1, "initial blocks of each document kept and recomputed (section 4: 1)",
                               side="both", low=0)
    local_blocks: int = knob(2, "local (last) blocks of each document kept and recomputed (section 4: 2)",
                             side="both", low=1)
    stable_layers: int = knob(4, "last layers whose top-p ratios are averaged (Eq. 3, the N* of appendix "
                              "A.2: the final 4-5 layers of the paper's models)", low=1)
    personal_bias: bool = knob(True, "add the other documents' local queries to the user query (Eq. 1)")
    update: str = knob("fusion", "recomputed KV replaces the cached KV (overwrite) or is blended with it "
                       "by their cosine similarity (fusion, Eq. 4; the ablations' default), the cosine "
                       "clipped to [0, 1] so the result is a blend; fusion-unclipped: a negative cosine "
                       "used as it is (Eq. 4 literally: it extrapolates past the cached KV)",
                       choices=("fusion", "fusion-unclipped", "overwrite"))
    pauta_sigma: float = knob(3.0, "a middle token is recomputed when its attention exceeds mean + sigma x "
                              "std of its document's (PauTa criterion, appendix A.1)", low=0.0)


_SAMKV_SOURCE = ("SamKV: Sparsified attention for multi-context KV caches (seed paper 002, no public code); "
                 "sections 3.1-3.3, Eq. 1-4")

ENTRIES = (
    MethodEntry("rag-no-recompute", MULTI_CONTEXT, "document KV caches joined as stored, only the query "
                "prefilled over them", MultiContextKnobs, policy=_P + "rag_no_recompute:RagNoRecomputePolicy",
                model=_M + "rag_no_recompute:RagNoRecompute",
                source="the 'Reuse' baseline of SamKV and CacheBlend (Yao et al., EuroSys 2025)"),
    MethodEntry("rag-full-recompute", MULTI_CONTEXT, "every document token recomputed at every layer "
                "(joint prefill of the concatenation)", MultiContextKnobs,
                policy=_P + "rag_full_recompute:RagFullRecomputePolicy",
                model=_M + "rag_full_recompute:RagFullRecompute",
                source="the 'Recompute' baseline of SamKV, CacheBlend and EPIC"),
    MethodEntry("cacheblend", MULTI_CONTEXT, "all tokens recomputed to a check layer, then those whose "
                "values deviate most", CacheBlendKnobs, policy=_P + "cacheblend:CacheBlendPolicy",
                model=_M + "cacheblend:CacheBlend",
                source="Yao et al., CacheBlend (EuroSys 2025, arXiv 2405.16444); YaoJiayi/CacheBlend "
                "vllm_blend"),
    MethodEntry("epic", MULTI_CONTEXT, "the first tokens of every document recomputed (LegoLink)", EpicKnobs,
                policy=_P + "epic:EpicPolicy", model=_M + "epic:Epic",
                source="Hu et al., EPIC (ICML 2025, arXiv 2410.15332); DerekHJH/epic"),
    MethodEntry("samkv", MULTI_CONTEXT, "initial + local blocks and top-p middle blocks kept per document "
                "(personalised query), initial, local and high-attention tokens recomputed", SamKVKnobs,
                policy=_P + "samkv:SamKVPolicy", model=_M + "samkv:SamKV", source=_SAMKV_SOURCE),
)
