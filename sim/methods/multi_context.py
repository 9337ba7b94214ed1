"""The shared model of the multi-context methods: document KV caches fetched from host memory, a token
subset recomputed, decode over the kept tokens.

A request is k documents (`documents` knob, or what a trace recorded) filling the prompt except the
query tokens. Each method's rule gives, per layer, the share of document tokens recomputed and the share
kept on the GPU (the sequence ratio); a trace of the method's own policy replaces the rule by what it
recorded (traces.records.MultiContextRecord -> sim.demand.RagShares).

Prefill (the time to first token), for the batch:
- `prefill_fetch`: the kept KV of the documents found in the document cache (share `hit_rate`) copied
  host -> GPU over the profile's link (pinned host memory; each layer's K or V of a document one run per
  KV head, or per kept block for block-sparse methods), the part of it on the critical path: all of it
  when fetch and recompute run one after the other, what the recompute does not hide when they are
  pipelined layer by layer (order below);
- `prefill_documents`: each missed document prefilled alone (a dense prefill of its tokens), then stored;
- `prefill_recompute_*`: per layer, the recomputed document tokens and the query tokens through the
  layer's projections and FFN (GEMMs of that many rows) and their attention over the kept context, the
  LM head once: the prefill of the recomputed tokens;
- a method's own selection work (SamKV's block scoring, CacheBlend's deviation check), where it has one.
Order of fetch and recompute (sim/methods/layer_pipeline.py): "as-published", each method's
`published_order`: "sequential" (the whole fetch, then the recompute) where the public code loads the
caches before the blended prefill (DerekHJH/epic benchmarks_ours/evals/e2e/main.py:157-185 collects
`old_kvs` before the timed request), "layer-pipelined" (layer l+1 fetched while layer l is recomputed,
one synchronised stage per layer) where it overlaps them (CacheBlend in LMCache); a method may hold part
of the fetch out of the pipeline (`pipelined_fetch_share`: SamKV's anchors precede its selection).
"ideal": every method layer-pipelined, the hardware-limit schedule at layer granularity.
Decode: the shared decoder layer (sim/methods/decoder_layer.py) attending the kept document tokens, the
query and the generated tokens at every layer. Memory: GPU per sequence, the kept tokens' KV; host per
sequence, the documents' full caches (shared by every request that retrieves the same documents; counted
per sequence here, an upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.demand import Demand
from sim.demand.records import RagShares
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import DecoderMethod
from sim.methods.layer_pipeline import fetch_compute_s
from traces.models import ModelSpec

__all__ = ["MultiContextModel", "rag_layout"]

_QUERY_TOKENS = 64  # tokens outside the documents (instruction + query) when no trace says


def rag_layout(input_tokens: int, shares: RagShares) -> tuple[int, float]:
    """(documents per request, tokens per document) of a prompt of `input_tokens` with these shares."""
    k = max(1, int(round(shares.documents)))
    return k, input_tokens * shares.document_share / k


@dataclass(frozen=True)
class MultiContextModel(DecoderMethod):
    """A multi-context method (module docstring); subclasses give `rule_shares`. shares: what the trace
    recorded (None: the method's rule)."""

    needs_demand: ClassVar[bool] = False
    own_demand_optional: ClassVar[bool] = True
    published_order: ClassVar[str] = "sequential"  # sim/methods/layer_pipeline.py ORDERS
    shares: RagShares | None = field(default=None, kw_only=True)

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        """(sequence ratio, recompute ratio per layer (L,)) by the method's own rule."""
        raise NotImplementedError

    def fetch_run_tokens(self, document_tokens: float) -> float:
        """Tokens per contiguous host run of a fetched document cache (per layer, head, K or V)."""
        return document_tokens

    def pipelined_fetch_share(self, document_tokens: float, sequence_ratio: float) -> float:
        """Share of the fetched document KV that can overlap the recompute (the rest is fetched first)."""
        return 1.0

    def fetch_order(self, ctx: CostContext) -> str:
        """The order of fetch and recompute (module docstring): `published_order` as published."""
        return self.published_order if ctx.implementation == "as-published" else "layer-pipelined"

    def for_demand(self, demand: Demand | None, transplant: bool = False) -> MultiContextModel:
        if demand is not None and demand.rag is not None:
            return replace(self, shares=demand.rag)
        return self

    def notes(self) -> tuple[str, ...]:
        if self.shares is None:
            return ("multi-context shares from the method's rule (no trace of its policy): "
                    f"{self.knobs.documents} documents, {_QUERY_TOKENS} query tokens",)
        return (f"multi-context shares from the trace: {self.shares.documents:g} documents, sequence ratio "
                f"{self.shares.sequence_ratio:.3f}, mean recompute ratio "
                f"{self.shares.recompute_ratio.mean():.3f}",)

    def resolved(self, cfg: SimConfig, model: ModelSpec) -> tuple[int, float, float, np.ndarray]:
        """(documents, tokens per document, sequence ratio, recompute ratio (L,)) for this config."""
        if self.shares is not None:
            k, n = rag_layout(cfg.input_tokens, self.shares)
            return k, n, self.shares.sequence_ratio, self.shares.recompute_ratio
        k = self.knobs.documents
        n = max(1.0, (cfg.input_tokens - _QUERY_TOKENS) / k)
        seq, ratios = self.rule_shares(model.n_layers, n)
        return k, n, seq, ratios

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        k, n, seq, _ = self.resolved(ctx.cfg, ctx.model)
        attended = ctx.demand.context_tokens.astype(np.float64) - (1.0 - seq) * k * n
        return ctx.full(ctx.cost.attention_s(attended))

    def selection_s(self, ctx: CostContext, k: int, n: float) -> dict[str, float]:
        """The method's own selection work at prefill (default: none)."""
        return {}

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        cfg, m, cost = ctx.cfg, ctx.model, ctx.cost
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        k, n, seq, ratios = self.resolved(cfg, m)
        h = self.knobs.hit_rate
        query = max(0.0, cfg.input_tokens - k * n)
        kept = seq * k * n + query
        fetched = b * h * k * n * seq * m.kv_bytes_per_token(dt)
        run_bytes = max(1, int(self.fetch_run_tokens(n) * d * dt))
        linear = np.zeros(m.n_layers)
        attention = np.zeros(m.n_layers)
        for layer in range(m.n_layers):
            rows = int(round(b * (ratios[layer] * k * n + query)))
            if rows == 0:
                continue
            linear[layer] = (cost.gemm_s(rows, m.hidden_size, (m.n_qo_heads + 2 * m.n_kv_heads) * d)
                             + cost.gemm_s(rows, m.n_qo_heads * d, m.hidden_size)
                             + cost.gemm_s(rows, m.hidden_size, 2 * m.ffn_size)
                             + cost.gemm_s(rows, m.ffn_size, m.hidden_size))
            flops = 4.0 * rows * m.n_qo_heads * d * kept
            n_bytes = b * m.n_kv_heads * kept * 2 * d * dt + 2 * rows * m.n_qo_heads * d * dt
            attention[layer] = float(cost.kernel_s(flops, n_bytes, 1))
        compute = linear + attention
        order = self.fetch_order(ctx)
        if order == "sequential":
            fetch_s = float(cost.copy_s(fetched, run_bytes, "h2d"))
        else:
            share = min(1.0, max(0.0, self.pipelined_fetch_share(n, seq)))
            first_s = float(cost.copy_s(fetched * (1.0 - share), run_bytes, "h2d"))
            layer_s = float(cost.copy_s(fetched * share / m.n_layers, run_bytes, "h2d"))
            per_layer = np.full(m.n_layers, layer_s)
            fetch_s = first_s + fetch_compute_s(order, per_layer, compute) - float(compute.sum())
        parts = {"prefill_fetch": fetch_s}
        one_doc = sum(cost.dense_prefill_s(max(1, int(round(n)))).values())  # the batch's, one document each
        parts["prefill_documents"] = (1.0 - h) * k * one_doc
        parts["prefill_recompute_linear"] = float(linear.sum())
        parts["prefill_recompute_attention"] = float(attention.sum())
        parts["prefill_lm_head"] = cost.gemm_s(b, m.hidden_size, m.vocab_size)
        parts.update(self.selection_s(ctx, k, n))
        return parts

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        k, n, seq, _ = self.resolved(cfg, model)
        per_token = model.kv_bytes_per_token(cfg.dtype_bytes)
        gpu = (cfg.max_context_tokens - (1.0 - seq) * k * n) * per_token
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(round(gpu)),
                          host_per_seq_bytes=int(round(k * n * per_token)))


def ceil_blocks(tokens: float, block: int) -> int:
    return max(1, math.ceil(tokens / block))
