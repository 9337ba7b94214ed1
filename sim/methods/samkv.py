"""SamKV (runtime: freekv_runtime/policies/samkv.py, following the paper; no public code): only the kept
blocks of each document fetched (block-sized host runs), initial + local + high-attention tokens
recomputed over the kept context, decode over the kept tokens.

Without a trace of its policy, the rule's shares: anchors (initial + local blocks) of every document
kept and recomputed, plus the cap of section 3.2's cross-document selection (total middle blocks / D
blocks) kept - the most the dynamic top-p can keep; a trace gives what the selection really kept.
Selection work at prefill (`prefill_select`): the query's incremental prefill over the anchors (its rows
through every layer) and the block scoring (a mean key per block, one score per block and query head per
layer), priced with the cost model.

Order (the paper, sections 3.1-3.3; no public code): the anchors' KV first (the personalised queries are
built from the initial and local KV, 3.1), then the selection (Eq. 3 pools the per-layer ratios over the
stable layers, so no layer's middle blocks are known before the scoring of all of them), then the kept
middle blocks, then the recompute layer by layer (3.3). As published: sequential (the paper describes no
overlap). "ideal": the anchors still fetched before the selection, the kept middle blocks fetched layer by
layer under the recompute (`pipelined_fetch_share`, sim/methods/layer_pipeline.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.methods.base import CostContext
from sim.methods.multi_context import MultiContextModel

__all__ = ["SamKV"]


@dataclass(frozen=True)
class SamKV(MultiContextModel):
    sources: ClassVar[tuple[str, ...]] = (
        "SamKV paper (seed 002): sections 3.1-3.3, Eq. 1-4; block 64, 1 initial + 2 local blocks (section 4)",
    )

    def _anchors(self, document_tokens: float) -> tuple[float, int]:
        block = self.knobs.block_tokens
        n_blocks = math.ceil(document_tokens / block)
        n_anchor = min(n_blocks, self.knobs.initial_blocks + self.knobs.local_blocks)
        return min(document_tokens, n_anchor * block), n_blocks - n_anchor

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        anchors, middle = self._anchors(document_tokens)
        k = self.knobs.documents
        kept = k * anchors + middle * self.knobs.block_tokens  # the cap: total middle blocks / k documents
        seq = min(1.0, kept / (k * document_tokens))
        return seq, np.full(n_layers, anchors / document_tokens)

    def pipelined_fetch_share(self, document_tokens: float, sequence_ratio: float) -> float:
        kept = sequence_ratio * document_tokens
        if kept <= 0:
            return 0.0
        anchors, _ = self._anchors(document_tokens)
        return max(0.0, kept - anchors) / kept

    def fetch_run_tokens(self, document_tokens: float) -> float:
        return min(document_tokens, self.knobs.block_tokens)

    def selection_s(self, ctx: CostContext, k: int, n: float) -> dict[str, float]:
        m, cfg, cost = ctx.model, ctx.cfg, ctx.cost
        b, d = cfg.batch_size, m.head_dim
        blocks = b * k * math.ceil(n / self.knobs.block_tokens)
        flops = m.n_layers * (2.0 * blocks * self.knobs.block_tokens * m.n_kv_heads * d
                              + 2.0 * blocks * m.n_qo_heads * d)
        n_bytes = m.n_layers * b * k * n * m.n_kv_heads * d * cfg.dtype_bytes
        return {"prefill_select": float(cost.kernel_s(flops, n_bytes, 4 * m.n_layers))}
