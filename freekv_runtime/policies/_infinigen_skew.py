"""InfiniGen's offline step: per layer, the skewing transform and the partial-column choice.

Source: snu-comparch/InfiniGen, the Llama accuracy path (read for semantics, nothing copied):
- accuracy/setup/gen_llama_skewing_matrix.py: runs a 2048-token calibration prompt (pg19) through the
  model, takes each head's post-RoPE query matrix Q (T, d), its SVD Q = U S V^T, and uses V (columns
  reordered) as the skewing matrix A: A is orthogonal, so (q A) . (k A) = q . k, and the columns of Q A
  carry Q's singular values in decreasing order, a few columns carrying most of q . k.
- accuracy/src/modeling_llama_ours_setup.py:214-224: on a short calibration prompt, per head, the top
  int(d * ratio) columns of sum_t |Q A| and the top int(d * ratio) columns of sum_t |K A| (post-RoPE
  keys), their union, are the partial columns (the "partial weight" mask).
- accuracy/src/modeling_llama_ours.py:306-313 (RoPE): the speculative query is the full query projection
  of the previous layer's input, RoPE applied at the current position, then skewed and masked to the
  partial columns; the keys are the post-RoPE keys, skewed. RoPE mixes dimension i with i + d/2, so the
  skew cannot be folded into W_q before RoPE (the OPT speedup path does fold it, OPT has no RoPE:
  speedup/infinigen/infinigen/skewing_controller.py `skew`). We do the same: skew after RoPE.

Here: one calibration prompt (seeded random token ids, `calib_tokens` long; the code uses real text) runs
through `ModelAccess.run_prefill` with `CaptureState`, which attends densely and keeps every layer's
post-RoPE q and k. GQA (InfiniGen's Llama-2 code is MHA): one A per KV head, from the stacked queries of
its group (a shared A keeps (q A) . (k A) = q . k for every query head of the group); columns from the
group's summed |Q A| and the head's |K A|. A's columns are ordered by decreasing singular value (the
code's permutation does not matter: columns are chosen by magnitude). A = the eigenvectors of Q^T Q
(the right singular vectors of Q) in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfigError
from freekv_runtime.policies.base import ModelAccess, PrefillOnlyState

__all__ = ["CaptureState", "LayerSkew", "calibrate"]


@dataclass(frozen=True)
class LayerSkew:
    """One layer's offline tables (float32, on the model's device).

    skew (Hkv, d, d): orthogonal A per KV head. cols (Hkv, c) int64: partial columns of the skewed space
    (padded by repeating a column); col_mask (Hkv, c) float32: 1 on real columns, 0 on padding."""

    skew: torch.Tensor
    cols: torch.Tensor
    col_mask: torch.Tensor

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """x (b, Hkv, ..., d) post-RoPE -> (b, Hkv, ..., c) its skewed partial columns (padding zeroed)."""
        b, hkv, d = x.shape[0], x.shape[1], x.shape[-1]
        flat = x.float().reshape(b, hkv, -1, d) @ self.skew  # (b, Hkv, n, d)
        idx = self.cols[None, :, None, :].expand(b, hkv, flat.shape[2], -1)
        part = flat.gather(3, idx) * self.col_mask[None, :, None, :]
        return part.reshape(*x.shape[:-1], -1)


class CaptureState(PrefillOnlyState):
    """Dense causal attention that keeps each layer's post-RoPE q (Hq, T, d) and k (Hkv, T, d) of the
    first sequence; only `prefill` is used (`ModelAccess.run_prefill`)."""

    def __init__(self) -> None:
        self.q: dict[int, torch.Tensor] = {}
        self.k: dict[int, torch.Tensor] = {}

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.q[layer], self.k[layer] = q[0].float(), k[0].float()
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)



def layer_skew(q: torch.Tensor, k: torch.Tensor, ratio: float) -> LayerSkew:
    """q (Hq, T, d), k (Hkv, T, d) post-RoPE calibration tensors -> the layer's tables."""
    hq, _, d = q.shape
    hkv = k.shape[0]
    n_cols = max(1, int(d * ratio))  # InfiniGen: int(head_dim * partial_weight_ratio)
    qg = q.double().reshape(hkv, -1, d)  # (Hkv, G * T, d): a group's queries stacked
    _, vecs = torch.linalg.eigh(qg.transpose(1, 2) @ qg)  # ascending eigenvalues
    skew = vecs.flip(-1)  # (Hkv, d, d), columns by decreasing singular value
    chosen = []
    for h in range(hkv):
        q_mass = (qg[h] @ skew[h]).abs().sum(0)
        k_mass = (k[h].double() @ skew[h]).abs().sum(0)
        both = torch.cat([q_mass.topk(n_cols).indices, k_mass.topk(n_cols).indices])
        chosen.append(torch.unique(both))  # sorted
    width = max(len(c) for c in chosen)
    cols = torch.stack([torch.cat([c, c[:1].expand(width - len(c))]) for c in chosen])
    mask = torch.stack([(torch.arange(width) < len(c)).float() for c in chosen])
    return LayerSkew(skew.float(), cols, mask)


def calibrate(model: ModelAccess, layers: list[int], ratio: float, n_tokens: int,
              seed: int) -> dict[int, LayerSkew]:
    """Run the seeded probe prompt and build the tables of `layers`."""
    vocab = getattr(model, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise RuntimeConfigError("method infinigen needs the model's vocab_size for its calibration prompt")
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (1, n_tokens), generator=g).to(model.device)
    capture = CaptureState()
    with torch.inference_mode():
        model.run_prefill(tokens, capture)
    device = model.device
    out = {}
    for layer in layers:
        t = layer_skew(capture.q[layer].cpu(), capture.k[layer].cpu(), ratio)
        out[layer] = LayerSkew(t.skew.to(device), t.cols.to(device), t.col_mask.to(device))
    return out
