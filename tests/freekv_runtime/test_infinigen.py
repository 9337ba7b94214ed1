"""InfiniGen policy: skewing keeps q . k, the speculation picks the top tokens, the movement fields.

The conformance suite (test_policy_conformance.py) covers budget, determinism, batching and the
full-budget case (dense); here the method's defining pieces on the suite's tiny random Llama.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, config_for, dense_reference, make_episode, run_policy, tiny_model

from freekv_runtime.config import RuntimeConfigError
from freekv_runtime.model import apply_rope
from freekv_runtime.policies import make_policy
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.timing import OpTimer

CPU = torch.device("cpu")


def _prepared(shape: AttentionShape, **extra):  # noqa: ANN202
    policy = make_policy(config_for("infinigen", knobs=dict(calib_tokens=128, **extra)))
    policy.prepare(tiny_model(shape))
    return policy


def test_skew_is_orthogonal_and_all_columns_reproduce_true_scores() -> None:
    """partial_ratio 1: every skewed column is kept, and (q A) . (k A) = q . k (A orthogonal)."""
    policy = _prepared(SHAPE, partial_ratio=1.0)
    d = SHAPE.head_dim
    g = torch.Generator().manual_seed(0)
    for layer, tables in policy._prepared.skews.items():
        eye = torch.eye(d).expand(SHAPE.n_kv_heads, d, d)
        torch.testing.assert_close(tables.skew.transpose(1, 2) @ tables.skew, eye, atol=1e-5, rtol=0)
        assert tables.cols.shape[1] == d and bool((tables.col_mask == 1).all()), layer
        q = torch.randn(1, SHAPE.n_kv_heads, SHAPE.group_size, d, generator=g)
        k = torch.randn(1, SHAPE.n_kv_heads, 30, d, generator=g)
        approx = tables.partial(q) @ tables.partial(k).transpose(-1, -2)
        torch.testing.assert_close(approx, q @ k.transpose(-1, -2), atol=1e-4, rtol=1e-5)


def test_speculative_scores_with_all_columns_equal_the_next_layers_true_scores() -> None:
    """The state's speculation of layer l from a hidden input: with every column it is exactly layer l's
    RoPE'd query (from that input) against layer l's keys, q . k / sqrt(d)."""
    policy = _prepared(SHAPE, partial_ratio=1.0)
    model = tiny_model(SHAPE)
    episode = make_episode(SHAPE, 50, 1, seed=2)
    state = policy.new_state(SHAPE, 1, CPU, torch.float32, OpTimer(CPU))
    for layer in range(SHAPE.n_layers):
        state.prefill(layer, *(t[None] for t in episode.prompt[layer]))
    hidden = episode.step_hidden[0, 1][None]  # (1, 1, D)
    with torch.no_grad():
        approx = state.speculative_scores(2, hidden, 50)
        q = model.q_proj(2)(hidden).view(1, 1, SHAPE.n_qo_heads, SHAPE.head_dim).transpose(1, 2)
        q = apply_rope(q, *model.rope_table(51).at(50, 1))
    keys = episode.prompt[2][1][None]  # (1, Hkv, T, d)
    true = q.reshape(1, SHAPE.n_kv_heads, SHAPE.group_size, SHAPE.head_dim) @ keys.transpose(-1, -2)
    torch.testing.assert_close(approx, true / math.sqrt(SHAPE.head_dim), atol=1e-4, rtol=1e-4)


def test_speculation_picks_the_top_tokens_on_a_crafted_case() -> None:
    """Five candidate tokens whose keys point along layer 2's speculative query (inside its partial
    columns) stand ~60 logits above the rest, within alpha of each other: InfiniGen's threshold counts
    exactly those five, and they are selected, best first, as the true top-5 of q . k."""
    shape = AttentionShape(n_layers=3, n_qo_heads=2, n_kv_heads=2, head_dim=16)  # G = 1
    policy = _prepared(shape)  # partial_ratio 0.2: a few of the 16 columns
    model, n, d = tiny_model(shape), 200, shape.head_dim
    g = torch.Generator().manual_seed(3)
    state = policy.new_state(shape, 1, CPU, torch.float32, OpTimer(CPU))
    hidden = torch.randn(1, 1, 96, generator=g)
    with torch.no_grad():
        q = model.q_proj(2)(hidden).view(1, 1, 2, d).transpose(1, 2)
        q = apply_rope(q, *model.rope_table(n + 1).at(n, 1))[0, :, 0]  # (Hkv, d) post-RoPE
    tables = policy._prepared.skews[2]
    in_cols = torch.zeros(2, d).scatter(1, tables.cols, tables.col_mask)  # (Hkv, d) partial columns
    direction = ((q[:, None] @ tables.skew)[:, 0] * in_cols)[:, None] @ tables.skew.transpose(1, 2)
    direction = direction[:, 0]  # (Hkv, d): q projected on the partial columns, back in key space
    keys = 0.01 * torch.randn(2, n, d, generator=g)
    targets = torch.tensor([150, 40, 90, 120, 60])  # candidates: outside sink [0, 8) and window
    scale = 60 * math.sqrt(d) / (q * direction).sum(-1)  # (Hkv,): the first target scores 60
    for rank, token in enumerate(targets):
        keys[:, token] = (1 - 0.015 * rank) * scale[:, None] * direction
    for layer in range(3):
        k = keys if layer == 2 else torch.randn(2, n, d, generator=g)
        q_prompt, v = torch.randn(1, 2, n, d, generator=g), torch.randn(1, 2, n, d, generator=g)
        state.prefill(layer, q_prompt, k[None], v)
    state.end_prefill()
    state.layer_inputs(1, hidden, torch.zeros(1, 2, 1, d), n)
    fetch = state.pending[2]
    assert fetch.n_sel.tolist() == [5]
    true_top = (q[:, None] @ keys.transpose(1, 2))[:, 0].topk(5).indices  # (Hkv, 5)
    for h in range(2):
        assert fetch.idx[0, h, 0].tolist() == targets.tolist()
        assert fetch.idx[0, h, 0].tolist() == true_top[h].tolist()


def test_movement_fields_on_a_hand_checkable_case() -> None:
    """Sink 8, window 16, budget 64, prompt 40: while the context fits the budget every token outside
    sink and window is prefetched each step (41 -> 17 fetched, 42 -> 18), the previous step's 17 are
    given up; beyond the budget, sink + window + selected <= 64. Layer 0 is dense and moves nothing. (One
    set per KV head, layer 1 speculated: the per-query-head union is checked below.)"""
    config = config_for("infinigen", knobs={"calib_tokens": 64, "selection": "per-kv-head",
                                            "dense_layer_1": False})
    run = run_policy(config, [make_episode(SHAPE, 40, 30, seed=4)])
    for t, dec in enumerate(run.steps):
        n = 41 + t
        assert (dec.attended_tokens[0, 0] == n).all()
        assert (dec.fetched_tokens[0, 0] == 0).all() and (dec.evicted_tokens[0, 0] == 0).all()
        for layer in (1, 2):
            fetched = dec.fetched_tokens[0, layer]
            assert (dec.attended_tokens[0, layer] == 8 + 16 + fetched).all()
            if n <= 64:
                assert (fetched == n - 24).all() and (dec.attended_tokens[0, layer] == n).all()
            else:
                assert (dec.attended_tokens[0, layer] <= 64).all()
            previous = run.steps[t - 1].fetched_tokens[0, layer] if t else np.zeros_like(fetched)
            np.testing.assert_array_equal(dec.evicted_tokens[0, layer], previous)
            assert all(len(p) == 0 for p in dec.selected[0][layer] + dec.missed[0][layer])
        assert not dec.corrected.any() and np.isnan(dec.similarity).all()
    assert run.steps[0].fetched_tokens[0, 1].tolist() == [17, 17]


def test_alpha_moves_the_selection() -> None:
    """A larger alpha counts more tokens above max - alpha: at least as many are prefetched."""
    episode = make_episode(SHAPE, 300, 4, seed=5)
    fetched = {}
    for alpha in (0.05, 0.2, 50.0):
        config = config_for("infinigen", budget_tokens=200, knobs={"alpha": alpha, "calib_tokens": 64,
                                                                   "selection": "per-kv-head",
                                                                   "dense_layer_1": False})
        run = run_policy(config, [episode])
        fetched[alpha] = sum(int(dec.fetched_tokens[:, 1:].sum()) for dec in run.steps)
    assert fetched[0.05] < fetched[0.2] < fetched[50.0] == 4 * 2 * 2 * (200 - 24), fetched


@pytest.mark.parametrize(("extra", "key"), [
    ({"alpha": 0}, "alpha"), ({"partial_ratio": 1.5}, "partial_ratio"), ({"calib_tokens": 4}, "calib_tokens"),
    ({"ratio": 0.1}, "ratio")])
def test_bad_knobs_name_the_key(extra: dict, key: str) -> None:
    with pytest.raises(RuntimeConfigError, match=f"(infinigen knob {key} must be|'{key}' is not a knob of)"):
        make_policy(config_for("infinigen", knobs=extra))


def test_layer_zero_must_be_dense() -> None:
    with pytest.raises(RuntimeConfigError, match="dense_layers must include layer 0"):
        make_policy(config_for("infinigen", dense_layers=(1,)))


@pytest.mark.parametrize("fetch_fraction", [None, 0.2])
def test_each_query_head_fetches_and_attends_its_own_speculated_tokens(fetch_fraction) -> None:
    """InfiniGen's rule per query head (modeling_llama_ours.py:218-238), written out: the speculated scores
    s_j of query head j; the count of candidates with s_j > max(s_j) - alpha, averaged over the heads and
    floored, capped (budget - sink - window, or int(0.2 x context) as the code); query head j's tokens are
    its own top-n by s_j; it attends sink + window + those. The KV head fetches the group's union. Layer 1
    is dense (the code speculates from layer 2 on)."""
    policy = _prepared(SHAPE, alpha=1.0, fetch_fraction=fetch_fraction)
    assert policy.knobs.selection == "per-query-head" and 1 not in policy._prepared.skews
    episode = make_episode(SHAPE, 120, 1, seed=6)
    state = policy.new_state(SHAPE, 1, CPU, torch.float32, OpTimer(CPU))
    for layer in range(SHAPE.n_layers):
        state.prefill(layer, *(t[None] for t in episode.prompt[layer]))
    state.end_prefill()
    hidden = episode.step_hidden[0, 1][None]
    with torch.no_grad():
        s = state.speculative_scores(2, hidden, 120)[0]  # (Hkv, G, N) before the new token
        state.layer_inputs(1, hidden, torch.zeros(1, SHAPE.n_kv_heads, 1, SHAPE.head_dim), 120)
    n_after, lo, hi = 121, 8, 121 - 16
    s = s.reshape(SHAPE.n_qo_heads, -1)[:, lo:hi]
    count = (s > s.amax(-1, keepdim=True) - 1.0).sum(-1).float().mean()
    cap = 64 - 8 - 16 if fetch_fraction is None else int(0.2 * n_after)
    n = min(int(count), cap, hi - lo)
    want = [torch.sort(row, descending=True, stable=True).indices[:n] + lo for row in s]  # per query head
    fetch = state.pending[2]
    assert fetch.n_sel.tolist() == [n] and n > 0
    g = SHAPE.group_size
    for j in range(SHAPE.n_qo_heads):
        assert fetch.idx[0, j // g, j % g, :n].tolist() == want[j].tolist()
    q, k, v = (t[None] for t in episode.steps[0][2])
    out = state.decode(2, q, k, v)[0, :, 0]
    dec = state.end_step()
    keys = torch.cat([episode.prompt[2][1], k[0]], dim=1)
    values = torch.cat([episode.prompt[2][2], v[0]], dim=1)
    for j in range(SHAPE.n_qo_heads):
        tokens = torch.cat([torch.arange(lo), want[j], torch.arange(hi, n_after)])
        kv = keys[j // g][None, None, tokens], values[j // g][None, None, tokens]
        ref = dense_reference(q[:, j:j + 1], *kv, causal=False)[0, 0, 0]
        torch.testing.assert_close(out[j].double(), ref, atol=1e-5, rtol=1e-5)
    for h in range(SHAPE.n_kv_heads):
        union = torch.unique(torch.cat(want[h * g:(h + 1) * g]))
        assert dec.fetched_tokens[0, 2, h] == len(union) >= n
        assert dec.attended_tokens[0, 2, h] == lo + n + (n_after - hi)
    assert not state.is_sparse(1)  # layer 1 dense
