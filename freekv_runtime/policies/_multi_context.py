"""The multi-context mechanism: document KV caches joined, a token subset recomputed layer by layer,
a token subset kept. Every multi-context method (traces/catalogue/multi_context.py) is a `RecomputePlan`
on top of it.

A prompt is a shared prefix (an instruction, cached at its own positions), documents and a user query
(`Segments`). Two passes run through the model:

1. `document_prefill`: each document attends only to itself (block-diagonal causal mask), which is what
   a document cache computed by prefilling the document alone holds. The documents run at their joined
   positions: RoPE makes q.k depend on the position difference only, so this equals prefilling a
   document at positions 0..n_i and re-rotating its keys to the joined positions, as CacheBlend
   (vllm_blend llama.py:175-179, old keys rotated with `org_pos`) and EPIC do when they load a cache.
   The query rows see what the plan's `query_view` allows (SamKV's query over initial + local blocks);
   the plan observes each layer (`observe_documents`).
2. `prefill` (the decode loop's prefill of the same prompt): at each layer the plan returns which tokens
   are recomputed (their fresh K/V, computed from hidden states that attended the joined context,
   replace - or with fusion blend with - the cached K/V) and which are kept (attended by every later
   token and by decoding; the others stay in the document cache and are never loaded). Prefix and query
   tokens are always fresh and kept. Every token's hidden state is carried through the layers (a real
   system computes only the recomputed ones; their values are the same, because a token's fresh K/V
   is used at a layer only when the plan recomputes it there).

Decoding attends the kept tokens of each layer plus the generated ones. The prefill decisions carry a
`traces.records.MultiContextRecord` per sequence: documents, kept and recomputed document tokens per layer.

Shapes: b = batch, Hq / Hkv = query / KV heads, T = prompt tokens, N = cached tokens, d = head dim.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies.base import (
    AttentionShape,
    KVPolicy,
    PolicyState,
    PrefillDecisions,
    StepDecisions,
)
from freekv_runtime.timing import OpTimer
from traces.records import MultiContextRecord

__all__ = ["Segments", "LayerPlan", "RecomputePlan", "MultiContextState", "MultiContextPolicy",
           "DocumentView"]

_EMPTY_PAGES = np.zeros(0, dtype=np.int32)


@dataclass(frozen=True)
class Segments:
    """Token ranges of a multi-context prompt: prefix [0, prefix_tokens), document i
    [starts[i], ends[i]), query [query_start, total_tokens)."""

    prefix_tokens: int
    document_tokens: tuple[int, ...]
    query_tokens: int

    def __post_init__(self) -> None:
        if not self.document_tokens or min(self.document_tokens) < 1:
            raise RuntimeInputError(f"a multi-context prompt needs documents of at least one token, got "
                                    f"{self.document_tokens}")
        if self.prefix_tokens < 0 or self.query_tokens < 1:
            raise RuntimeInputError("a multi-context prompt needs a query of at least one token")

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(self.prefix_tokens + int(x) for x in np.cumsum((0,) + self.document_tokens[:-1]))

    @property
    def ends(self) -> tuple[int, ...]:
        return tuple(s + n for s, n in zip(self.starts, self.document_tokens, strict=True))

    @property
    def query_start(self) -> int:
        return self.prefix_tokens + sum(self.document_tokens)

    @property
    def total_tokens(self) -> int:
        return self.query_start + self.query_tokens

    def document_mask(self, device: torch.device) -> torch.Tensor:
        """(T,) bool: True on document tokens."""
        mask = torch.zeros(self.total_tokens, dtype=torch.bool, device=device)
        mask[self.prefix_tokens:self.query_start] = True
        return mask

    def document_ids(self, device: torch.device) -> torch.Tensor:
        """(T,) int64: the document of each token, -1 for the prefix, D for the query."""
        ids = torch.full((self.total_tokens,), -1, dtype=torch.long, device=device)
        for i, (s, e) in enumerate(zip(self.starts, self.ends, strict=True)):
            ids[s:e] = i
        ids[self.query_start:] = len(self.document_tokens)
        return ids


@dataclass(frozen=True)
class DocumentView:
    """One layer of the document pass as a plan sees it: q (b, Hq, T, d), keys / values (b, Hkv, T, d)
    as the document caches hold them (post-RoPE at the joined positions)."""

    layer: int
    q: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor


@dataclass(frozen=True)
class LayerPlan:
    """One layer's decision, (b, T) bool each: `recompute` (a document token's K/V recomputed over the
    joined context), `keep` (a document token attended); prefix and query entries are ignored (always
    fresh and kept). fuse: blend recomputed and cached K/V by their cosine similarity (SamKV Eq. 4)
    instead of overwriting; fuse_clip: the cosine clipped to [0, 1] (a blend of the two) where it is
    negative, instead of Eq. 4 taken literally (`_fuse`)."""

    recompute: torch.Tensor
    keep: torch.Tensor
    fuse: bool = False
    fuse_clip: bool = True


class RecomputePlan(ABC):
    """A multi-context method's rule (per request: `MultiContextPolicy.new_plan` makes one per state).
    needs_document_pass: False when the plan recomputes everything (the document caches are never read,
    so the runner skips the document pass)."""

    needs_document_pass: bool = True

    def query_view(self, seg: Segments, device: torch.device) -> torch.Tensor | None:
        """(T,) bool of the document tokens the query rows attend in the document pass (None: all)."""
        return None

    def observe_documents(self, seg: Segments, view: DocumentView) -> None:
        """Sees every layer of the document pass (default: nothing)."""
        return

    @abstractmethod
    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        """This layer's recompute and keep sets; fresh_* are the K/V every token would have over the joined
        context at this layer (meaningful for the tokens recomputed at every earlier layer), cached_* the
        document caches' (b, Hkv, T, d)."""


def _document_pass_mask(seg: Segments, query_view: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """(T, T) bool, True = may attend: prefix causal; each document causal within itself (not even the
    prefix: a document cache is its document alone); query rows causal over prefix, the viewed document
    tokens and the query."""
    t = seg.total_tokens
    ids = seg.document_ids(device)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    same = ids[:, None] == ids[None, :]
    mask = causal & same
    viewed = torch.ones(t, dtype=torch.bool, device=device) if query_view is None else query_view.clone()
    viewed[: seg.prefix_tokens] = True
    query_rows = ids == len(seg.document_tokens)
    mask[query_rows] = causal[query_rows] & (viewed[None, :] | query_rows[None, :])
    return mask


def _fuse(fresh: torch.Tensor, cached: torch.Tensor, clip: bool = True) -> torch.Tensor:
    """SamKV Eq. 4: theta * new + (1 - theta) * old, theta = cos(new, old) per token and head. clip: theta
    limited to [0, 1], so the result is a blend of the two (section 3.3 calls theta a "blending ratio"
    whose weights sum to 1 and reports it "around 0.9"; it does not say what a negative cosine does).
    Unclipped, a negative theta extrapolates past the cached entry (weights < 0 and > 1)."""
    theta = F.cosine_similarity(fresh.float(), cached.float(), dim=-1)[..., None]  # (b, Hkv, T, 1)
    if clip:
        theta = theta.clamp(0.0, 1.0)
    return (theta * fresh.float() + (1 - theta) * cached.float()).to(fresh.dtype)


class MultiContextState(PolicyState):
    """Per-request state (module docstring). `set_segments` first, then `document_prefill` for every layer
    (the runner runs it as a forward pass), then the decode loop's prefill and decode steps."""

    def __init__(self, plan: RecomputePlan, shape: AttentionShape, batch_size: int, device: torch.device,
                 timer: OpTimer) -> None:
        self.plan = plan
        self.shape = shape
        self.batch_size = batch_size
        self.device = device
        self.timer = timer
        self.seg: Segments | None = None
        self.cached: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.keep: list[torch.Tensor] = []  # per layer (b, N) bool
        self.kept_counts = np.zeros((batch_size, shape.n_layers), dtype=np.int64)
        self.recomputed_counts = np.zeros((batch_size, shape.n_layers), dtype=np.int64)

    def fork(self) -> MultiContextState:
        """A copy that decodes on its own from this point (decode never writes a cached tensor in place)."""
        twin = copy.copy(self)
        twin.keys, twin.values, twin.keep = list(self.keys), list(self.values), list(self.keep)
        return twin

    def set_segments(self, seg: Segments) -> None:
        self.seg = seg

    def _segments(self) -> Segments:
        if self.seg is None:
            raise RuntimeInputError("a multi-context method runs on a multi-context task only (rag_facts, "
                                    "rag_qa): its prompt has no documents")
        return self.seg

    def document_prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The document pass (module docstring): block-diagonal causal attention; stores the caches."""
        seg = self._segments()
        with self.timer.op("document_prefill"):
            mask = _document_pass_mask(seg, self.plan.query_view(seg, q.device), q.device)
            self.cached.append((k, v))
            self.plan.observe_documents(seg, DocumentView(layer, q, k, v))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Join, recompute, keep (module docstring); causal attention over the kept tokens."""
        seg = self._segments()
        if not self.plan.needs_document_pass and len(self.cached) <= layer:
            self.cached.append((k, v))  # never read: every token is recomputed
        if len(self.cached) <= layer:
            raise RuntimeError("MultiContextState.prefill before the document pass of this layer")
        with self.timer.op("attention"):
            cached_k, cached_v = self.cached[layer]
            plan = self.plan.layer_plan(seg, layer, k, v, cached_k, cached_v)
            docs = seg.document_mask(q.device)  # (T,)
            recompute = plan.recompute & docs  # (b, T)
            keep = plan.keep | ~docs
            clip = plan.fuse_clip
            new_k, new_v = (_fuse(k, cached_k, clip), _fuse(v, cached_v, clip)) if plan.fuse else (k, v)
            sel, is_doc = recompute[:, None, :, None], docs[None, None, :, None]
            k_mix = torch.where(is_doc, torch.where(sel, new_k, cached_k), k)  # (b, Hkv, T, d)
            v_mix = torch.where(is_doc, torch.where(sel, new_v, cached_v), v)
            t = seg.total_tokens
            causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
            eye = torch.eye(t, dtype=torch.bool, device=q.device)
            mask = (causal[None] & keep[:, None, :]) | eye[None]  # (b, T, T)
            out = F.scaled_dot_product_attention(q, k_mix, v_mix, attn_mask=mask[:, None], enable_gqa=True)
            self.keys.append(k_mix)
            self.values.append(v_mix)
            self.keep.append(keep)
            self.kept_counts[:, layer] = (keep & docs).sum(-1).cpu().numpy()
            self.recomputed_counts[:, layer] = recompute.sum(-1).cpu().numpy()
        self.cached[layer] = (cached_k[:, :, :0], cached_v[:, :, :0])  # the document cache is not read again
        return out

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, 1, d); k, v (b, Hkv, 1, d) -> (b, Hq, 1, d) over the kept and generated tokens."""
        with self.timer.op("attention"):
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)
            ones = torch.ones(self.batch_size, 1, dtype=torch.bool, device=k.device)
            self.keep[layer] = torch.cat([self.keep[layer], ones], dim=1)
            mask = self.keep[layer][:, None, None, :]  # (b, 1, 1, N)
            return F.scaled_dot_product_attention(q, self.keys[layer], self.values[layer], attn_mask=mask,
                                                  enable_gqa=True)

    def end_prefill(self) -> PrefillDecisions:
        seg = self._segments()
        empty_layers = [[_EMPTY_PAGES] * self.shape.n_kv_heads for _ in range(self.shape.n_layers)]
        records = [
            MultiContextRecord(tuple(seg.document_tokens), seg.prefix_tokens, seg.query_tokens,
                               tuple(int(x) for x in self.kept_counts[i]),
                               tuple(int(x) for x in self.recomputed_counts[i]))
            for i in range(self.batch_size)
        ]
        return PrefillDecisions(initial_selected=[empty_layers for _ in range(self.batch_size)],
                                multi_context=records)

    def end_step(self) -> StepDecisions:
        """No selection at decode: the kept set is fixed; attended tokens per layer recorded."""
        b, n_layers, hkv = self.batch_size, self.shape.n_layers, self.shape.n_kv_heads
        empty = [[[_EMPTY_PAGES] * hkv for _ in range(n_layers)] for _ in range(b)]
        attended = np.stack([keep.sum(-1).cpu().numpy() for keep in self.keep], axis=1)  # (b, L)
        return StepDecisions(
            similarity=np.full((b, n_layers, hkv), np.nan, dtype=np.float32),
            corrected=np.zeros((b, n_layers, hkv), dtype=bool),
            selected=empty,
            missed=empty,
            attended_tokens=np.repeat(attended[:, :, None], hkv, axis=2).astype(np.int32),
        )


class MultiContextPolicy(KVPolicy):
    """A multi-context method: `new_plan` makes its per-request rule from `self.config.knobs`."""

    multi_context = True

    @abstractmethod
    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        """The method's rule for one request."""

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> MultiContextState:
        return MultiContextState(self.new_plan(shape), shape, batch_size, device, timer)
