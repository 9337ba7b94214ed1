"""The full policy's preallocated cache and decisions, and token sampling (no model needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import Sampling, sample
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.policies.dense import DenseKVCache, DensePolicy
from freekv_runtime.timing import OpTimer

SHAPE = AttentionShape(n_layers=2, n_qo_heads=6, n_kv_heads=2, head_dim=8)
CPU = torch.device("cpu")


def test_cache_grows_in_chunks_and_keeps_its_contents() -> None:
    cache = DenseKVCache.empty(SHAPE, batch_size=3, device=CPU, dtype=torch.float32, chunk_tokens=16)
    g = torch.Generator().manual_seed(0)
    ks, vs = [], []
    for n_new in (13, 1, 1, 1, 20, 1):  # crosses the 16- and 32-token chunk boundaries
        k, v = torch.randn(3, 2, n_new, 8, generator=g), torch.randn(3, 2, n_new, 8, generator=g)
        ks.append(k)
        vs.append(v)
        keys, values = cache.append(1, k, v)
    assert cache.lengths == [0, 37]
    assert cache.keys[1].shape[2] == 48  # 3 chunks of 16
    torch.testing.assert_close(keys, torch.cat(ks, dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat(vs, dim=2), rtol=0, atol=0)


def test_full_state_is_dense_attention_and_reports_no_selection() -> None:
    g = torch.Generator().manual_seed(1)
    state = DensePolicy(RuntimeConfig(method="dense", measure_attention_mass=True)).new_state(
        SHAPE, 2, CPU, torch.float32, OpTimer(CPU)
    )
    keys, values = [], []
    for layer in range(SHAPE.n_layers):
        q, k, v = (torch.randn(2, h, 17, 8, generator=g) for h in (6, 2, 2))
        out = state.prefill(layer, q, k, v)
        kk, vv = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)  # GQA by copying, group size 3
        ref = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        torch.testing.assert_close(out, ref)
        keys.append(k)
        values.append(v)
    pre = state.end_prefill()
    assert len(pre.initial_selected) == 2 and all(len(h) == 0 for h in pre.initial_selected[0][1])
    for layer in range(SHAPE.n_layers):
        q, k, v = (torch.randn(2, h, 1, 8, generator=g) for h in (6, 2, 2))
        out = state.decode(layer, q, k, v)
        kk = torch.cat([keys[layer], k], 2).repeat_interleave(3, 1)
        vv = torch.cat([values[layer], v], 2).repeat_interleave(3, 1)
        torch.testing.assert_close(out, torch.softmax(q @ kk.transpose(-1, -2) / math.sqrt(8), -1) @ vv)
    dec = state.end_step()
    assert dec.similarity.shape == (2, 2, 2) and np.isnan(dec.similarity).all()
    assert not dec.corrected.any() and (dec.attended_tokens == 18).all()
    assert (dec.attention_mass == 1.0).all()
    assert all(len(p) == 0 for b in dec.selected for layer in b for p in layer)


def test_greedy_is_argmax_and_top_p_keeps_the_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.05, 0.1, 0.8]]))
    assert sample(logits, Sampling(), None).tolist() == [0, 3]
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample(logits, Sampling(1.0, 0.7), g) for _ in range(400)])  # (400, 2)
    assert set(draws[:, 0].tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.7: tokens 2, 3 never drawn
    assert set(draws[:, 1].tolist()) == {3}
    with pytest.raises(ValueError, match="top_p"):
        Sampling(1.0, 0.0)
