"""RazorAttention's defining behaviour on small hand-checkable cases (the conformance suite covers the rest):
the probe finds a planted induction head and a planted echo head; non-retrieval heads attend exactly
sink + window + 1; the compensation token is the mean of the dropped keys and values and enters the
softmax as that many tokens; the movement fields; knob validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies import make_policy
from freekv_runtime.policies.base import AttentionShape, PolicyState
from freekv_runtime.policies.razorattention import RazorAttentionPolicy, retrieval_kv_heads
from freekv_runtime.timing import OpTimer

SHAPE = AttentionShape(n_layers=3, n_qo_heads=4, n_kv_heads=2, head_dim=32)
INDUCTION = (2, 3)  # (layer, query head) planted as an induction head: KV head 1 of layer 2
ECHO = (1, 0)  # planted echo head: KV head 0 of layer 1


class PlantedModel:
    """A ModelAccess whose attention is constructed, not learned: token embeddings are one-hot (vocabulary
    = head_dim); every head's query is 40 x the current token's embedding. The planted induction head's key
    at position j is the embedding of token j - 1 (a previous-token feature, as an induction circuit
    composes it), so its query at i matches the key after each earlier occurrence of token i; the planted
    echo head's key is the embedding of token j itself; every other head's keys are random."""

    vocab_size = SHAPE.head_dim
    shape = SHAPE
    device = torch.device("cpu")
    dtype = torch.float32

    def run_prefill(self, tokens: torch.Tensor, state: PolicyState) -> torch.Tensor:
        b, t = tokens.shape
        g = torch.Generator().manual_seed(1)
        emb = torch.eye(self.vocab_size)[tokens]  # (b, T, d)
        previous = torch.cat([torch.zeros_like(emb[:, :1]), emb[:, :-1]], dim=1)
        hq, hkv, d = SHAPE.n_qo_heads, SHAPE.n_kv_heads, SHAPE.head_dim
        group = hq // hkv
        for layer in range(SHAPE.n_layers):
            q = 40.0 * emb[:, None].repeat(1, hq, 1, 1)
            k = torch.randn(b, hkv, t, d, generator=g)
            for (lay, head), feature in ((INDUCTION, previous), (ECHO, emb)):
                if lay == layer:
                    k[:, head // group] = feature
                    others = [h for h in range(hq) if h // group == head // group and h != head]
                    q[:, others] = torch.randn(b, len(others), t, d, generator=g)  # the group's others: noise
            state.prefill(layer, q, k, torch.randn(b, hkv, t, d, generator=g))
        return torch.zeros(b, self.vocab_size)


def config(**kw) -> RuntimeConfig:
    base = dict(method="razorattention", page_size=4, budget_tokens=16, sink_tokens=4, window_tokens=4,
                dense_layers=(0,), knobs={"induction_fraction": 1 / 12, "echo_fraction": 1 / 12,
                                          "probe_tokens": 24, "probe_repeats": 3})
    return RuntimeConfig(**{**base, **kw})


def prepared(cfg: RuntimeConfig) -> RazorAttentionPolicy:
    policy = make_policy(cfg)
    policy.prepare(PlantedModel())
    return policy


def test_probe_finds_the_planted_heads() -> None:
    policy = prepared(config())
    ind, echo = policy.induction_scores, policy.echo_scores
    assert np.unravel_index(np.argmax(ind), ind.shape) == INDUCTION
    assert np.unravel_index(np.argmax(echo), echo.shape) == ECHO
    assert ind[INDUCTION] > 0.4 and echo[ECHO] > 0.2  # random heads score ~1/i
    expected = np.zeros((3, 2), dtype=bool)
    expected[2, 1] = expected[1, 0] = True  # GQA: the planted query heads' KV heads
    np.testing.assert_array_equal(policy.retrieval_heads, expected)
    again = prepared(config())  # seeded: the same probe, the same scores
    np.testing.assert_array_equal(again.induction_scores, ind)


def test_retrieval_heads_rule() -> None:
    ind = np.array([[0.9, 0.1, 0.2, 0.3], [0.0, 0.0, 0.5, 0.0]])
    echo = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.7, 0.0, 0.0]])
    # "kv" (default): KV-head scores = the group's best query head: induction [[0.9, 0.3], [0.0, 0.5]],
    # echo [[0, 0], [0.7, 0]]; of the 4 KV heads the top ceil(0.25 * 4) = 1 by induction, 1 by echo
    heads = retrieval_kv_heads(ind, echo, 0.25, 0.25, n_kv_heads=2)
    np.testing.assert_array_equal(heads, [[True, False], [True, False]])
    # "any_query": top 2 of 8 query heads by induction + top 1 by echo, then any query head of the group
    heads = retrieval_kv_heads(ind, echo, 0.25, 0.125, n_kv_heads=2, gqa="any_query")
    np.testing.assert_array_equal(heads, [[True, False], [True, True]])
    none = retrieval_kv_heads(ind, echo, 0.0, 0.0, n_kv_heads=2)
    assert not none.any()


def test_share_of_kv_heads_kept_whole_is_the_fraction() -> None:
    """Under GQA the default keeps the configured share of KV heads whole (the paper's ~15%), where
    marking a KV head for any of its query heads keeps more."""
    g = np.random.default_rng(0)
    ind, echo = g.random((30, 9)), g.random((30, 9))  # smollm2-135m: 30 layers, 9 query heads, 3 KV heads
    kv = retrieval_kv_heads(ind, echo, 0.14, 0.01, n_kv_heads=3)
    assert kv.sum() <= math.ceil(0.14 * 90) + math.ceil(0.01 * 90) == 14  # 15.6% of 90
    anyq = retrieval_kv_heads(ind, echo, 0.14, 0.01, n_kv_heads=3, gqa="any_query")
    assert anyq.sum() > kv.sum()


def test_window_is_max_of_threshold_and_context_over_ratio() -> None:
    """Algorithm 1 line 2: L_h = max(S0, ceil(N / C)), S0 = budget - sink - 1 = 11 here, C = 2: at N = 21
    L_h = 11, at N = 40 L_h = 20; with window_rule budget it stays 11."""
    state = prepared(config(knobs={**config().knobs.values("runtime"), "compression_ratio": 2.0})).new_state(
        SHAPE, 1, torch.device("cpu"), torch.float32, OpTimer(torch.device("cpu")))
    assert [state.window_tokens(n) for n in (21, 40)] == [11, 20]
    budget = prepared(config(knobs={**config().knobs.values("runtime"), "window_rule": "budget"})).new_state(
        SHAPE, 1, torch.device("cpu"), torch.float32, OpTimer(torch.device("cpu")))
    assert budget.window_tokens(40) == 11
    _, decisions, *_ = _drive(prepared(config(knobs={**config().knobs.values("runtime"),
                                                     "compression_ratio": 2.0})), prompt=38, steps=2)
    # N = 39: L_h = 20, a non-retrieval head holds sink 4 + 20 recent + the compensation token
    assert decisions[0].attended_tokens[0, 2, 0] == 4 + 20 + 1


def _drive(policy: RazorAttentionPolicy, prompt: int, steps: int, seed: int = 0):  # noqa: ANN202
    """Prefill `prompt` random tokens and decode `steps`; returns (state, decisions, decode inputs, outs)."""
    g = torch.Generator().manual_seed(seed)
    hq, hkv, d = SHAPE.n_qo_heads, SHAPE.n_kv_heads, SHAPE.head_dim
    state = policy.new_state(SHAPE, 1, torch.device("cpu"), torch.float32, OpTimer(torch.device("cpu")))
    keys, values = [], []
    for layer in range(SHAPE.n_layers):
        k, v = torch.randn(1, hkv, prompt, d, generator=g), torch.randn(1, hkv, prompt, d, generator=g)
        state.prefill(layer, torch.randn(1, hq, prompt, d, generator=g), k, v)
        keys.append(k)
        values.append(v)
    state.end_prefill()
    decisions, last = [], []
    for _ in range(steps):
        last = []
        for layer in range(SHAPE.n_layers):
            q = torch.randn(1, hq, 1, d, generator=g)
            k, v = torch.randn(1, hkv, 1, d, generator=g), torch.randn(1, hkv, 1, d, generator=g)
            keys[layer], values[layer] = torch.cat([keys[layer], k], 2), torch.cat([values[layer], v], 2)
            last.append((q, state.decode(layer, q, k, v)))
        decisions.append(state.end_step())
    return state, decisions, keys, values, last


def test_attended_tokens_and_movement() -> None:
    """Prompt 20, budget 16, sink 4: window W = 11. Step 1 (21 tokens): non-retrieval heads keep 4 + 11 and
    drop 6, attend 15 + 1 compensation token; then each step drops one more. Retrieval heads and the dense
    layer attend everything and drop nothing; nothing is fetched."""
    policy = prepared(config())
    _, decisions, *_ = _drive(policy, prompt=20, steps=3)
    for t, dec in enumerate(decisions):
        n = 21 + t
        np.testing.assert_array_equal(dec.attended_tokens[0], [[n, n], [n, 16], [16, n]])
        evicted = 6 if t == 0 else 1
        np.testing.assert_array_equal(dec.evicted_tokens[0], [[0, 0], [0, evicted], [evicted, 0]])
        assert dec.fetched_tokens is None
        assert dec.selected[0][2][0].size == 0 and dec.missed[0][2][0].size == 0
    none = prepared(config(knobs={**config().knobs.values("runtime"), "compensation": "none"}))
    dec = _drive(none, prompt=20, steps=1)[1][0]
    assert dec.attended_tokens[0, 2, 0] == 15  # sink + window, no compensation token


@pytest.mark.parametrize("compensation", ["count", "single"])
def test_compensation_token_is_the_mean_of_the_dropped(compensation: str) -> None:
    """After 4 steps over a 20-token prompt (24 tokens) a non-retrieval head holds [0, 4) + [13, 24) and has
    dropped [4, 13): its compensation token is their mean key and value, and its output is the softmax over
    the kept tokens plus that token, weighted by the 9 tokens it stands for ("count") or as one ("single")."""
    policy = prepared(config(knobs={**config().knobs.values("runtime"), "compensation": compensation}))
    state, _, keys, values, last = _drive(policy, prompt=20, steps=4)
    layer, kv = 2, 0  # a non-retrieval head of a sparse layer
    k_hat, v_hat, n = state.compensation_token(layer)
    torch.testing.assert_close(k_hat[0, kv], keys[layer][0, kv, 4:13].mean(0))
    torch.testing.assert_close(v_hat[0, kv], values[layer][0, kv, 4:13].mean(0))
    assert n[0, kv] == 9
    kept = torch.cat([torch.arange(4), torch.arange(13, 24)])
    q, out = last[layer]
    group = SHAPE.n_qo_heads // SHAPE.n_kv_heads
    for h in range(kv * group, (kv + 1) * group):
        qh = q[0, h, 0].double()
        k_all = torch.cat([keys[layer][0, kv, kept], k_hat[0, kv][None]]).double()
        v_all = torch.cat([values[layer][0, kv, kept], v_hat[0, kv][None]]).double()
        logits = k_all @ qh / math.sqrt(SHAPE.head_dim)
        logits[-1] += math.log(9) if compensation == "count" else 0.0
        ref = torch.softmax(logits, 0) @ v_all
        torch.testing.assert_close(out[0, h, 0].double(), ref, atol=1e-5, rtol=1e-5)


def test_bad_knobs_and_missing_probe() -> None:
    with pytest.raises(RuntimeConfigError, match="razorattention knob compensation must be one of count"):
        make_policy(config(knobs={"compensation": "mean"}))
    with pytest.raises(RuntimeConfigError, match="razorattention knob probe_tokens must be an integer >= 2"):
        make_policy(config(knobs={"probe_tokens": 1}))
    with pytest.raises(RuntimeConfigError, match="'heads' is not a knob of razorattention"):
        make_policy(config(knobs={"heads": 3}))
    with pytest.raises(RuntimeConfigError, match="prepare"):
        make_policy(config()).new_state(SHAPE, 1, torch.device("cpu"), torch.float32,
                                        OpTimer(torch.device("cpu")))
