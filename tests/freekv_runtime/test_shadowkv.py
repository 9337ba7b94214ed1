"""ShadowKV policy: low-rank keys, re-factorisation, value-only recall of changed chunks (random tensors).

The conformance suite (test_policy_conformance.py) covers the budget, determinism, batching and a budget
covering the context equalling dense attention; these tests prove ShadowKV's own behaviour.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_policy_conformance import (
    SHAPE,
    Episode,
    config_for,
    dense_reference,
    make_episode,
    run_policy,
    tiny_model,
    undo_rope,
)

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.model import apply_rope
from freekv_runtime.policies import make_policy
from freekv_runtime.policies._lowrank import LowRankKeys, chunk_landmarks
from freekv_runtime.policies._shadowkv_chunks import chunk_scores
from freekv_runtime.policies.base import AttentionShape
from traces.catalogue.retrieval import shadowkv_rank

# float32 SVD of a (T, Hkv d) matrix with entries ~N(0, 1): reconstruction error at full rank
FULL_RANK_ATOL = 1e-4


def test_full_rank_factorisation_reproduces_keys_and_fold_equals_direct() -> None:
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(2, 3, 40, 8, generator=g)  # (b, Hkv, T, d): D = 24 < T, so rank 24 is full
    direct = LowRankKeys.factorise(keys, max_rank=160)
    assert direct.rank == 24  # capped at the matrix rank
    rows = torch.arange(40).expand(2, 3, 40)
    torch.testing.assert_close(direct.keys(rows), keys, atol=FULL_RANK_ATOL, rtol=0)
    folded = LowRankKeys.factorise(keys[:, :, :16], 160).fold(keys[:, :, 16:29]).fold(keys[:, :, 29:])
    assert folded.n_tokens == 40
    torch.testing.assert_close(folded.keys(rows), keys, atol=FULL_RANK_ATOL, rtol=0)


def test_truncated_rank_is_the_best_approximation() -> None:
    """Below full rank the error is the Eckart-Young optimum: the discarded singular values' energy."""
    g = torch.Generator().manual_seed(1)
    keys = torch.randn(1, 2, 50, 8, generator=g)
    flat = keys.transpose(1, 2).reshape(1, 50, 16)
    s = torch.linalg.svdvals(flat)[0]
    rows = torch.arange(50).expand(1, 2, 50)
    errors = []
    for rank in (4, 8, 12):
        approx = LowRankKeys.factorise(keys, rank).keys(rows)
        err2 = float(((approx - keys) ** 2).sum())
        assert err2 == pytest.approx(float((s[rank:] ** 2).sum()), rel=1e-3)
        errors.append(err2)
    assert errors[0] > errors[1] > errors[2] > 0


def test_landmarks_are_chunk_means_and_outlier_score_is_min_cosine() -> None:
    keys = torch.zeros(1, 1, 8, 2)
    keys[0, 0, :4] = torch.tensor([1.0, 0.0])  # chunk 0: all alike -> cosine 1
    keys[0, 0, 4:8] = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])  # one opposite key
    landmarks, min_cos = chunk_landmarks(keys, 4)
    torch.testing.assert_close(landmarks[0, 0], torch.tensor([[1.0, 0.0], [0.5, 0.0]]))
    torch.testing.assert_close(min_cos[0, 0], torch.tensor([1.0, -1.0]))


def test_policy_keys_reproduce_true_keys_at_full_rank_after_refactorisation() -> None:
    """The layer's low-rank factors rebuild the pre-RoPE keys of every factorised token (prompt and the
    decode tokens folded in by re-factorisations) and, rotated, the true post-RoPE keys."""
    # page 8, sink 8, window 16, budget 64; refactor every 16 steps; rank 160 > Hkv d = 32: full rank
    config = config_for("shadowkv", knobs={"rank": 160})
    episode = make_episode(SHAPE, 83, 40, seed=2)
    run = run_policy(config, [episode])
    flags = np.array([dec.refactorised[0, 1].all() for dec in run.steps])
    assert flags.nonzero()[0].tolist() == [15, 31]  # every refactor_interval = window_tokens steps
    assert not any(dec.refactorised[0, 0].any() for dec in run.steps)  # the dense layer never
    layer = run.state.layers[1]
    true_k = torch.cat([episode.prompt[1][1]] + [step[1][1] for step in episode.steps], dim=1)[None]
    rope = tiny_model().rope_table(200)
    true_pre = undo_rope(true_k, rope, 0)
    # the last re-factorisation (step 31, 115 tokens) folded the whole chunks leaving <= window exact tokens
    assert layer.fact_end == 8 + 8 * -(-(115 - 16 - 8) // 8) == 104
    rows = torch.arange(layer.fact_end - 8).expand(1, SHAPE.n_kv_heads, -1)
    rebuilt = layer.lowrank.keys(rows)
    assert layer.lowrank.rank == SHAPE.n_kv_heads * SHAPE.head_dim  # 32 columns < 96 rows: full rank
    torch.testing.assert_close(rebuilt, true_pre[:, :, 8:layer.fact_end], atol=FULL_RANK_ATOL, rtol=0)
    cos, sin = rope.at(8, layer.fact_end - 8)
    torch.testing.assert_close(apply_rope(rebuilt, cos, sin), true_k[:, :, 8:layer.fact_end],
                               atol=FULL_RANK_ATOL, rtol=0)


# ---- a hand-checkable selection: chunk c's post-RoPE keys all 10 e_c, the query 10 (e_a + e_b) ----
HAND = AttentionShape(n_layers=2, n_qo_heads=2, n_kv_heads=1, head_dim=16)


def _hand_episode(queries: list[list[int]]) -> Episode:
    """Prompt of 20 tokens: chunks 0..4 of 4 tokens with keys 10 e_c; queries[0] is the last prompt
    query's chunks, queries[t + 1] step t's; the decode tokens' keys are tiny."""
    g = torch.Generator().manual_seed(3)
    hq, hkv, d = HAND.n_qo_heads, HAND.n_kv_heads, HAND.head_dim

    def query(chunks: list[int]) -> torch.Tensor:
        q = torch.zeros(hq, 1, d)
        q[:, 0, chunks] = 10.0
        return q

    keys = torch.zeros(hkv, 20, d)
    for c in range(5):
        keys[:, 4 * c: 4 * c + 4, c] = 10.0
    prompt_q = 0.01 * torch.randn(hq, 20, d, generator=g)
    prompt_q[:, -1:] = query(queries[0])
    prompt = [(prompt_q, keys, torch.randn(hkv, 20, d, generator=g)) for _ in range(HAND.n_layers)]
    steps = [[(query(chunks), 0.01 * torch.randn(hkv, 1, d, generator=g), torch.randn(hkv, 1, d, generator=g))
              for _ in range(HAND.n_layers)] for chunks in queries[1:]]
    hidden = torch.randn(HAND.n_layers, 20 + len(steps), 96, generator=g)
    return Episode(prompt, steps, hidden[:, :20], hidden[:, 20:].transpose(0, 1)[:, :, :, None].contiguous())


def test_value_fetch_counts_only_the_changed_chunks() -> None:
    """page 4, no sink, window 4, budget 16, re-factorise every 4 steps, no outliers. Prefill: chunks 0-3
    factorised, tokens 16-19 exact; k = (16 - recent) // 4."""
    config = RuntimeConfig(method="shadowkv", page_size=4, budget_tokens=16, sink_tokens=0, window_tokens=4,
                           dense_layers=(0,), knobs={"outlier_chunks": 0, "rank": 160})  # full rank
    episode = _hand_episode([[0, 1, 2], [1, 3], [1, 3], [0, 2], [0, 2, 4]])
    run = run_policy(config, [episode], HAND)
    assert [a.tolist() for a in run.prefill.initial_selected[0][1]] == [[0, 1, 2]]  # k = (16 - 4) // 4
    sparse = [(dec.selected[0][1][0].tolist(), dec.missed[0][1][0].tolist(),
               int(dec.fetched_tokens[0, 1, 0]), int(dec.evicted_tokens[0, 1, 0]),
               bool(dec.refactorised[0, 1, 0]), int(dec.attended_tokens[0, 1, 0])) for dec in run.steps]
    assert sparse == [
        ([1, 3], [3], 4, 8, False, 2 * 4 + 5),  # recent 5 -> k 2: chunk 3 fetched, chunks 0 and 2 given up
        ([1, 3], [], 0, 0, False, 2 * 4 + 6),  # the same chunks: nothing moves
        ([0, 2], [0, 2], 8, 8, False, 2 * 4 + 7),
        # step 4: tokens 16-19 (chunk 4) folded in (given up as exact: 4), recent 4 -> k 3: chunk 4 fetched
        ([0, 2, 4], [4], 4, 4, True, 3 * 4 + 4),
    ]
    assert all(int(dec.fetched_tokens[0, 0, 0]) == 0 for dec in run.steps)  # the dense layer moves nothing
    # step 0's output is exact attention over chunks 1 and 3 plus the recent tokens 16-20 (full rank)
    q, k, v = (x[None] for x in episode.steps[0][1])
    keys = torch.cat([episode.prompt[1][1][None], k], dim=2)
    values = torch.cat([episode.prompt[1][2][None], v], dim=2)
    attended = [*range(4, 8), *range(12, 16), *range(16, 21)]
    ref = dense_reference(q, keys[:, :, attended], values[:, :, attended], causal=False)
    torch.testing.assert_close(run.decode_out[0][1].double(), ref, atol=1e-4, rtol=0)


def test_outlier_chunks_stay_whole_on_the_device_and_are_never_selected() -> None:
    config = config_for("shadowkv", budget_tokens=96, knobs={"outlier_chunks": 2})
    run = run_policy(config, [make_episode(SHAPE, 83, 6, seed=4)])
    layer = run.state.layers[1]
    assert layer.outliers.shape == (1, SHAPE.n_kv_heads, 2)
    lowest = torch.sort(torch.sort(layer.min_cos, dim=-1).indices[..., :2], dim=-1).values
    torch.testing.assert_close(layer.outliers, lowest)
    outlier_pages = (layer.outliers + 1).numpy()  # region chunk index + the sink's one page
    for dec in run.steps:
        for h in range(SHAPE.n_kv_heads):
            assert not set(dec.selected[0][1][h].tolist()) & set(outlier_pages[0, h].tolist())
        # sink 8 + outliers 16 + selected + recent <= 96
        assert (dec.attended_tokens[0, 1] <= 96).all()


def test_knobs_are_validated() -> None:
    with pytest.raises(RuntimeConfigError, match="'ranks' is not a knob of shadowkv"):
        make_policy(config_for("shadowkv", knobs={"ranks": 4}))
    with pytest.raises(RuntimeConfigError, match="shadowkv knob rank must be an integer >= 1"):
        make_policy(config_for("shadowkv", knobs={"rank": 0}))
    with pytest.raises(RuntimeConfigError,
                       match="shadowkv knob refactor_interval: budget_tokens=64 must hold"):
        make_policy(config_for("shadowkv", knobs={"refactor_interval": 64}))  # 8 + 16 + 64 > 64
    with pytest.raises(RuntimeConfigError, match="prepare"):
        make_policy(config_for("shadowkv")).new_state(SHAPE, 1, torch.device("cpu"), torch.float32, None)
    policy = make_policy(RuntimeConfig(method="shadowkv"))  # the FreeKV paper's baseline setting
    assert (policy.rank, policy.refactor_interval, policy.outlier_chunks) == (None, 512, 6)


def test_default_rank_is_shadowkvs_share_of_the_key_width() -> None:
    """ShadowKV keeps rank 160 of Hkv d = 8 x 128 = 1024 on Llama-3-8B (models/llama.py:86); the default
    keeps the same share of the model's key width: round(160 / 1024 * Hkv d)."""
    assert shadowkv_rank(None, 8, 128) == 160
    assert shadowkv_rank(None, 3, 64) == 30  # smollm2-135m: 30 of 192 (a fixed 160 kept keys almost exact)
    assert shadowkv_rank(7, 3, 64) == 7
    run = run_policy(config_for("shadowkv"), [make_episode(SHAPE, 83, 2, seed=2)])
    assert run.state.rank == round(160 / 1024 * SHAPE.n_kv_heads * SHAPE.head_dim) == 5
    assert run.state.layers[1].lowrank.rank == 5


def test_landmark_scores_use_shadowkvs_fixed_scale() -> None:
    """Softmax of q . landmark / sqrt(128) per query head (kv_cache.py:289), then the max over the group,
    whatever the head dim (here 16)."""
    run = run_policy(config_for("shadowkv"), [make_episode(SHAPE, 83, 1, seed=3)])
    ls = run.state.layers[1]
    q = torch.randn(1, SHAPE.n_qo_heads, SHAPE.head_dim, generator=torch.Generator().manual_seed(0))
    got = chunk_scores(ls, q)
    qg = q.reshape(1, SHAPE.n_kv_heads, -1, SHAPE.head_dim)
    raw = torch.einsum("bhgd,bhcd->bhgc", qg, ls.landmarks.float()) / math.sqrt(128)
    out = torch.zeros_like(got, dtype=torch.bool).scatter_(2, ls.outliers, True)
    want = torch.softmax(raw.masked_fill(out[:, :, None], float("-inf")), -1).amax(2)
    torch.testing.assert_close(got.masked_fill(out, 0.0), want.masked_fill(out, 0.0))
