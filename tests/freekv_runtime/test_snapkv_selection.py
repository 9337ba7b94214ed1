"""SnapKV per query head (its code) against the rule written out, and against the pooled selection.

SnapKV's code repeats K/V to every query head before the vote (FasterDecoding/SnapKV
snapkv/monkeypatch/llama_hijack_4_37.py:75-77), so each query head votes with its own observation window
(snapkv_utils.py:45-55: the window's causal probabilities summed over the window's queries), pools along
the tokens (:56-60) and keeps its own top tokens (:61-62), the window kept (:65-67).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from test_policy_conformance import SHAPE, config_for, dense_reference, make_episode, run_policy

PROMPT, SPARSE, OBS, KERNEL = 83, 1, 8, 5


def _own_votes(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(Hq, T - OBS) float64: each query head's votes over the prefix, avg-pooled, from its KV head's keys."""
    hq, t, d = q.shape
    keys = k.double().repeat_interleave(hq // k.shape[0], dim=0)  # the code's repeat_kv
    s = q.double() @ keys.transpose(-1, -2) / math.sqrt(d)  # (Hq, T, T)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    votes = torch.softmax(s, dim=-1)[:, t - OBS:, : t - OBS].sum(dim=1)
    return F.avg_pool1d(votes[:, None], KERNEL, 1, KERNEL // 2)[:, 0]


def test_snapkv_keeps_each_query_heads_own_top_votes_and_attends_only_them() -> None:
    budget, sink, window = 48, 8, 16
    config = config_for("snapkv", budget_tokens=budget, sink_tokens=sink, window_tokens=window,
                        knobs={"observation_tokens": OBS, "kernel_size": KERNEL})
    assert config.knobs.selection == "per-query-head"
    episode = make_episode(SHAPE, PROMPT, 1, seed=14)
    run = run_policy(config, [episode])
    q, k, v = episode.prompt[SPARSE]
    pooled = _own_votes(q, k)
    n, g = PROMPT + 1, SHAPE.group_size
    own = run.state.own[SPARSE][0].cpu().numpy()  # (Hq, N)
    expected = np.zeros((SHAPE.n_qo_heads, n), bool)
    for j in range(SHAPE.n_qo_heads):
        expected[j, :sink] = True
        expected[j, n - window:] = True
        expected[j, PROMPT - OBS:PROMPT] = True  # the observation window, kept before any prefix token
        free = budget - int(expected[j].sum())
        middle = np.arange(sink, min(PROMPT - OBS, n - window))
        order = np.argsort(pooled[j, middle].numpy(), kind="stable")
        expected[j, middle[order[len(middle) - free:]]] = True
    np.testing.assert_array_equal(own, expected)
    keep = run.state.keep[SPARSE][0].cpu().numpy()  # (Hkv, N): what a KV head holds
    np.testing.assert_array_equal(keep, expected.reshape(SHAPE.n_kv_heads, g, n).any(axis=1))
    assert (run.steps[0].attended_tokens[0, SPARSE] == budget).all()
    # each query head's output: dense attention over its own kept tokens only
    ks = torch.cat([k, episode.steps[0][SPARSE][1]], dim=1)
    vs = torch.cat([v, episode.steps[0][SPARSE][2]], dim=1)
    q_t = episode.steps[0][SPARSE][0]  # (Hq, 1, d)
    for j in range(SHAPE.n_qo_heads):
        tok = torch.as_tensor(np.flatnonzero(expected[j]))
        kv = slice(j // g, j // g + 1)
        ref = dense_reference(q_t[None, j:j + 1], ks[None, kv, tok], vs[None, kv, tok], causal=False)
        torch.testing.assert_close(run.decode_out[-1][SPARSE][0, j:j + 1].double(), ref[0], atol=1e-5, rtol=0)


def test_pooling_the_group_drops_tokens_a_query_head_voted_for() -> None:
    """The pooled selection (kvpress's GQA handling) keeps one set per KV head; on this episode some query
    head's own top tokens are missing from it."""
    kw = dict(budget_tokens=48, sink_tokens=8, window_tokens=16)
    episode = make_episode(SHAPE, PROMPT, 1, seed=14)
    own = run_policy(config_for("snapkv", **kw, knobs={"observation_tokens": OBS}), [episode])
    knobs = {"observation_tokens": OBS, "selection": "per-kv-head"}
    pooled = run_policy(config_for("snapkv", **kw, knobs=knobs), [episode])
    heads = own.state.own[SPARSE][0].cpu().numpy()
    shared = np.repeat(pooled.state.keep[SPARSE][0].cpu().numpy(), SHAPE.group_size, axis=0)
    assert (heads & ~shared).any()
    assert pooled.state.own[SPARSE] is None
