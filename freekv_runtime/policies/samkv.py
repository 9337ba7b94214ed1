"""SamKV: sparsify each document's cache with a personalised query, recompute a subset of what is kept.

Source: "SamKV: ... attention sparsification for multiple-context KV cache" (the seed paper
shared/reference/seeds/002; no public code). Followed section by section, per layer n and document i:

- Blocks (section 4, "Implementation"): block_tokens 64, 1 initial and 2 local blocks per document, kept
  whole ("retain them in full resolution", section 3.2) and used as anchors; the blocks between them are
  the middle, represented by the mean of their keys (section 3.2).
- Generic query (section 3.1): the user query prefilled incrementally over the initial + local KV of all
  documents (the document pass's query rows see only those), its q mean-pooled over the query tokens:
  Q_que^(n) per query head.
- Personalised query (Eq. 1): Q_hat_i = Q_que + 1/(D-1) sum_{j != i} |cos(Q_que, Q_loc_j)| Q_loc_j, with
  Q_loc_j the mean q of document j's local blocks (its local Q cache).
- Dynamic top-p (Eq. 2): s_anc, s_max, s_min = Q_hat_i . K of the anchor (mean key of the initial + local
  tokens), of the best and of the worst middle block; P^(n) = (s_max - s_anc) / (s_max - s_min) when
  s_anc is in (s_min, s_max], else 0. Eq. 3: P_i = mean of P^(n) over the stable layers N* (appendix A.2
  finds them among the last layers: 4-5 of the paper's models; `stable_layers` of the last ones here).
- Selection (end of section 3.2): per layer, the top ceil(P_i x middle blocks) middle blocks of each
  document by score; the scores of every document's candidates normalised (here: divided by the largest
  |score| of that document's middle blocks) and pooled, and the best total-middle-blocks / D kept.
  Selection is per layer (section 3.3: "sparse KV caches ... cannot be aligned across layers") and, here,
  one set per layer for all heads (a token's hidden state is recomputed for all heads at once).
- Recompute (section 3.3): the initial and local tokens, plus the kept middle tokens with significant
  attention in their own document (appendix A.1's PauTa criterion: above mean + 3 sigma; the attention
  a token receives from its document's local queries in the document pass, mean over heads). Rule 1 (a
  token recomputed at layer n has its outputs computed at every earlier layer, attending the kept KV)
  and rule 2 (cached entries reused elsewhere) are what the mechanism does (_multi_context.py).
- Update (Eq. 4): fusion KV = theta KV_new + (1 - theta) KV_old with theta = cos(KV_new, KV_old) per
  token and head (the ablations' default), theta clipped to [0, 1] (`fusion`: a blend, as section 3.3
  calls it; `fusion-unclipped` takes a negative cosine as it is, which extrapolates), or overwrite.
- Answer (end of section 3.3): the user query prefilled again over the updated sparse caches: the
  mechanism's prefill of the query rows.
Differences: appendix A.1 ranks blocks by a power-law fit of their most-attended token's attention
curve; here a block's importance is its mean key's score against the personalised query (section 3.2's
own representation), and s_max / s_min are the best and worst such scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from freekv_runtime.policies._multi_context import (
    DocumentView,
    LayerPlan,
    MultiContextPolicy,
    RecomputePlan,
    Segments,
)
from freekv_runtime.policies.base import AttentionShape

__all__ = ["SamKVPolicy", "SamKVPlan", "DocBlocks", "doc_blocks", "personalised_queries", "top_p_ratio"]


@dataclass(frozen=True)
class DocBlocks:
    """One document's blocks as absolute token ranges: anchors (initial + local) and middle blocks."""

    anchor_tokens: tuple[int, ...]
    middle: tuple[tuple[int, int], ...]
    local_tokens: tuple[int, ...]


def doc_blocks(start: int, end: int, block_tokens: int, initial_blocks: int, local_blocks: int) -> DocBlocks:
    """Blocks of the document [start, end): the first `initial_blocks` and the last `local_blocks` are
    anchors (all of them when the document has no more blocks than that), the rest middle."""
    bounds = [(s, min(s + block_tokens, end)) for s in range(start, end, block_tokens)]
    n_local = min(local_blocks, len(bounds))
    n_init = min(initial_blocks, len(bounds) - n_local)
    local = bounds[len(bounds) - n_local:]
    anchors = bounds[:n_init] + local
    middle = tuple(bounds[n_init:len(bounds) - n_local])
    return DocBlocks(tuple(t for s, e in anchors for t in range(s, e)), middle,
                     tuple(t for s, e in local for t in range(s, e)))


def personalised_queries(q_que: torch.Tensor, q_loc: torch.Tensor) -> torch.Tensor:
    """Eq. 1. q_que (b, Hq, d); q_loc (b, D, Hq, d) -> (b, D, Hq, d): Q_que + 1/(D-1) sum_{j != i}
    |cos(Q_que, Q_loc_j)| Q_loc_j (per query head); Q_que itself when D = 1."""
    n_docs = q_loc.shape[1]
    if n_docs < 2:
        return q_que[:, None].expand_as(q_loc).clone()
    weight = F.cosine_similarity(q_que[:, None], q_loc, dim=-1).abs()[..., None]  # (b, D, Hq, 1)
    weighted = weight * q_loc  # (b, D, Hq, d)
    others = weighted.sum(1, keepdim=True) - weighted  # sum over j != i
    return q_que[:, None] + others / (n_docs - 1)


def top_p_ratio(s_anc: torch.Tensor, s_max: torch.Tensor, s_min: torch.Tensor) -> torch.Tensor:
    """Eq. 2, elementwise: (s_max - s_anc) / (s_max - s_min) if s_min < s_anc <= s_max, else 0."""
    inside = (s_anc > s_min) & (s_anc <= s_max)
    ratio = (s_max - s_anc) / (s_max - s_min).clamp_min(1e-30)
    return torch.where(inside, ratio, torch.zeros_like(ratio))


def _scores(q_hat: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """q_hat (b, Hq, d), keys (b, Hkv, n, d) -> (b, n): q . k per query head against its KV head, mean
    over heads."""
    b, hq, d = q_hat.shape
    hkv = keys.shape[1]
    qg = q_hat.float().reshape(b, hkv, hq // hkv, d)
    return torch.einsum("bhgd,bhnd->bhgn", qg, keys.float()).mean(dim=(1, 2))


@dataclass
class _LayerObs:
    q_que: torch.Tensor  # (b, Hq, d)
    q_loc: torch.Tensor  # (b, D, Hq, d)
    block_keys: list[torch.Tensor]  # per document (b, Hkv, n_mid, d)
    anchor_keys: list[torch.Tensor]  # per document (b, Hkv, 1, d)
    importance: torch.Tensor  # (b, T): attention from the token's document's local queries


class SamKVPlan(RecomputePlan):
    def __init__(self, n_layers: int, block_tokens: int, initial_blocks: int, local_blocks: int,
                 stable_layers: int, personal_bias: bool, fuse: bool, pauta_sigma: float,
                 fuse_clip: bool = True) -> None:
        self.n_layers = n_layers
        self.block_tokens, self.initial_blocks, self.local_blocks = block_tokens, initial_blocks, local_blocks
        self.stable_layers, self.personal_bias, self.fuse = stable_layers, personal_bias, fuse
        self.fuse_clip = fuse_clip
        self.sigma = pauta_sigma
        self.obs: dict[int, _LayerObs] = {}
        self.plans: list[LayerPlan] | None = None
        self.ratios: torch.Tensor | None = None  # (b, D): Eq. 3's P_i

    def blocks(self, seg: Segments) -> list[DocBlocks]:
        return [doc_blocks(s, e, self.block_tokens, self.initial_blocks, self.local_blocks)
                for s, e in zip(seg.starts, seg.ends, strict=True)]

    def query_view(self, seg: Segments, device: torch.device) -> torch.Tensor:
        view = torch.zeros(seg.total_tokens, dtype=torch.bool, device=device)
        for blocks in self.blocks(seg):
            view[list(blocks.anchor_tokens)] = True
        return view

    def observe_documents(self, seg: Segments, view: DocumentView) -> None:
        q, k = view.q, view.keys  # (b, Hq, T, d), (b, Hkv, T, d)
        b, hq, t, d = q.shape
        group = hq // k.shape[1]
        blocks = self.blocks(seg)
        q_loc = torch.stack([q[:, :, list(bl.local_tokens)].float().mean(2) for bl in blocks], dim=1)
        importance = torch.zeros(b, t, device=q.device)
        block_keys, anchor_keys = [], []
        for bl, start, end in zip(blocks, seg.starts, seg.ends, strict=True):
            local = torch.tensor(bl.local_tokens, device=q.device)
            ql = q[:, :, local].float()  # (b, Hq, nl, d)
            kd = k[:, :, start:end].float().repeat_interleave(group, dim=1)  # (b, Hq, n, d)
            scores = ql @ kd.transpose(-1, -2) / math.sqrt(d)  # (b, Hq, nl, n)
            causal = torch.arange(start, end, device=q.device)[None, :] <= local[:, None]  # (nl, n)
            probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            importance[:, start:end] = probs.mean(dim=(1, 2))
            mids = [k[:, :, s:e].float().mean(2) for s, e in bl.middle]
            block_keys.append(torch.stack(mids, dim=2) if mids else k.new_zeros(b, k.shape[1], 0, d).float())
            anchor_keys.append(k[:, :, list(bl.anchor_tokens)].float().mean(2, keepdim=True))
        self.obs[view.layer] = _LayerObs(q[:, :, seg.query_start:].float().mean(2), q_loc, block_keys,
                                         anchor_keys, importance)

    def _layer_scores(self, layer: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per document: (middle block scores (b, n_mid), anchor score (b,)) against its personalised
        query."""
        obs = self.obs[layer]
        q_hat = personalised_queries(obs.q_que, obs.q_loc) if self.personal_bias else \
            obs.q_que[:, None].expand_as(obs.q_loc)
        return [(_scores(q_hat[:, i], obs.block_keys[i]), _scores(q_hat[:, i], obs.anchor_keys[i])[:, 0])
                for i in range(q_hat.shape[1])]

    def _ratios(self, n_docs: int, b: int, device: torch.device) -> torch.Tensor:
        """Eq. 2 per stable layer, Eq. 3's mean over them -> (b, D)."""
        stable = range(max(0, self.n_layers - self.stable_layers), self.n_layers)
        total = torch.zeros(b, n_docs, device=device)
        for layer in stable:
            for i, (mid, anc) in enumerate(self._layer_scores(layer)):
                if mid.shape[1] > 0:
                    total[:, i] += top_p_ratio(anc, mid.max(-1).values, mid.min(-1).values)
        return total / len(stable)

    def _plan_layer(self, seg: Segments, layer: int, ratios: torch.Tensor, blocks: list[DocBlocks],
                    device: torch.device) -> LayerPlan:
        b, t = ratios.shape[0], seg.total_tokens
        keep = torch.zeros(b, t, dtype=torch.bool, device=device)
        recompute = torch.zeros(b, t, dtype=torch.bool, device=device)
        scores = self._layer_scores(layer)
        importance = self.obs[layer].importance
        n_mid_total = sum(len(bl.middle) for bl in blocks)
        cap = math.ceil(n_mid_total / len(blocks))
        for row in range(b):
            pool: list[tuple[float, int, int]] = []  # (normalised score, document, block)
            for i, (bl, (mid, _)) in enumerate(zip(blocks, scores, strict=True)):
                keep[row, list(bl.anchor_tokens)] = True
                recompute[row, list(bl.anchor_tokens)] = True
                n_mid = len(bl.middle)
                if n_mid == 0:
                    continue
                n_pick = math.ceil(float(ratios[row, i]) * n_mid)
                s = mid[row]
                norm = s / s.abs().max().clamp_min(1e-30)
                for j in torch.topk(s, k=n_pick).indices.tolist() if n_pick else []:
                    pool.append((float(norm[j]), i, j))
            pool.sort(key=lambda x: -x[0])
            for _, i, j in pool[:cap]:
                start, end = blocks[i].middle[j]
                keep[row, start:end] = True
            for bl in blocks:  # PauTa: significant middle tokens among the kept ones
                middle = [tok for s, e in bl.middle for tok in range(s, e)]
                if not middle:
                    continue
                imp = importance[row, middle]
                limit = imp.mean() + self.sigma * imp.std(unbiased=False)
                hot = torch.tensor(middle, device=device)[imp > limit]
                recompute[row, hot] = keep[row, hot]
        return LayerPlan(recompute=recompute, keep=keep, fuse=self.fuse, fuse_clip=self.fuse_clip)

    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        if self.plans is None:  # the document pass saw every layer: plan them all (Eq. 3 needs the last)
            blocks = self.blocks(seg)
            self.ratios = self._ratios(len(blocks), fresh_k.shape[0], fresh_k.device)
            self.plans = [self._plan_layer(seg, n, self.ratios, blocks, fresh_k.device)
                          for n in range(self.n_layers)]
        return self.plans[layer]


class SamKVPolicy(MultiContextPolicy):
    name = "samkv"

    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        k = self.config.knobs
        return SamKVPlan(shape.n_layers, k.block_tokens, k.initial_blocks, k.local_blocks, k.stable_layers,
                         k.personal_bias, k.update.startswith("fusion"), k.pauta_sigma,
                         fuse_clip=k.update == "fusion")
