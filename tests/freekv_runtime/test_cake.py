"""CAKE's defining rule on tiny tensors, written out independently of the policy: each layer's preference
H^(1/tau1) V^(1/tau2) from its observation window's attention (qtris123/cakekv cake/model/modify_llama.py
90-108), the total budget split by preference and rebalanced as cake/utils.py `adjust_budgets` does
(transcribed below with numpy), and each layer keeping the top tokens by mean + gamma var of their
attention, pooled (modify_llama.py 111-120), with its window. With no sink and the recent window equal to
CAKE's window, the policy's first decode step attends the code's compression at hh_l - 1 plus the token
just appended (the budget convention counts that token)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from test_policy_conformance import make_episode, run_policy

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.policies.cake import pooled_kept
from traces.layer_budgets import cake_layer_budgets

SHAPE4 = AttentionShape(n_layers=4, n_qo_heads=6, n_kv_heads=2, head_dim=16)
T, BUDGET, W, GAMMA, TAU1, TAU2 = 80, 24, 4, 200.0, 1.5, 0.6


def _adjust_budgets(budget_list, total_budget, seq_len):  # noqa: ANN001, ANN202
    """cake/utils.py 21-67, transcribed."""
    budget_list = np.array(budget_list, dtype=int)
    excess = np.maximum(budget_list - seq_len, 0)
    budget_list = np.minimum(budget_list, seq_len)
    total_excess = np.sum(excess)
    if total_excess > 0:
        valid = budget_list < seq_len
        if valid.sum() > 0:
            budget_list[valid] += total_excess // valid.sum()
            budget_list[np.where(valid)[0][: total_excess % valid.sum()]] += 1
    diff = total_budget - np.sum(budget_list)
    if diff != 0:
        valid = budget_list < seq_len if diff > 0 else budget_list > 1
        if valid.sum() > 0:
            step, rest = abs(diff) // valid.sum(), abs(diff) % valid.sum()
            sign = 1 if diff > 0 else -1
            budget_list[valid] += sign * step
            budget_list[np.where(valid)[0][:rest]] += sign
    return budget_list.tolist()


def test_allocation_is_adjust_budgets() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        prefs = (rng.random(n) ** 3).tolist()
        total, cap = int(rng.integers(n, 400)), int(rng.integers(5, 120))
        want = _adjust_budgets([p / sum(prefs) * total for p in prefs], total, cap)
        assert cake_layer_budgets(prefs, total, cap) == want


def test_pooling_runs_over_the_kept_tokens_in_order() -> None:
    g = torch.Generator().manual_seed(1)
    score = torch.rand(2, 3, 20, generator=g)
    keep = torch.rand(2, 3, 20, generator=g) > 0.4
    got = pooled_kept(score, keep, window=3)
    for i in range(2):
        for h in range(3):
            idx = keep[i, h].nonzero()[:, 0]
            body = idx[:-3]
            want = F.avg_pool1d(score[i, h, body][None, None], 5, stride=1, padding=2)[0, 0]
            torch.testing.assert_close(got[i, h, body], want)
            assert (got[i, h, idx[-3:]] > 1e29).all()


def _layer_stats(prompt: tuple) -> tuple[float, torch.Tensor]:
    q, k, _ = (x.double() for x in prompt)
    group, d = q.shape[0] // k.shape[0], q.shape[-1]
    s = q[:, -W:] @ k.repeat_interleave(group, 0).transpose(-1, -2) / math.sqrt(d)  # (Hq, W, T)
    s = s.masked_fill(torch.arange(T)[None, :] > torch.arange(T - W, T)[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    prefix = p[..., : T - W]
    h = float(-(prefix * torch.log(prefix + 1e-10)).sum())
    v = float(prefix.var(dim=1).sum())
    ind = (p.mean(1) + GAMMA * p.var(1))[:, : T - W]
    ind = F.avg_pool1d(ind[:, None], 5, stride=1, padding=2)[:, 0]
    return h ** (1 / TAU1) * v ** (1 / TAU2), ind.reshape(k.shape[0], group, -1).mean(1)


def test_layers_keep_their_preferred_share_of_the_top_tokens() -> None:
    config = RuntimeConfig(method="cake", page_size=1, budget_tokens=BUDGET, sink_tokens=0, window_tokens=W,
                           dense_layers=(), knobs={"observation_tokens": W, "tau1": TAU1, "tau2": TAU2,
                                                   "gamma": GAMMA})
    episode = make_episode(SHAPE4, T, 2, seed=5)
    run = run_policy(config, [episode], SHAPE4)
    stats = [_layer_stats(episode.prompt[layer]) for layer in range(4)]
    prefs = [s[0] for s in stats]
    total = (BUDGET - W) * 4
    hh = _adjust_budgets([p / sum(prefs) * total for p in prefs], total, T - W)
    assert len(set(hh)) > 1  # the preferences differ: an uneven split is tested
    for layer in range(4):
        assert (run.steps[0].attended_tokens[0, layer] == hh[layer] + W).all()
        q_t, k_t, v_t = (x.double() for x in episode.steps[0][layer])
        _, k, v = (x.double() for x in episode.prompt[layer])
        group = SHAPE4.n_qo_heads // SHAPE4.n_kv_heads
        for h in range(2):
            top = stats[layer][1][h].topk(hh[layer] - 1).indices.sort().values
            idx = torch.cat([top, torch.arange(T - W, T)])
            keys, values = torch.cat([k[h, idx], k_t[h]]), torch.cat([v[h, idx], v_t[h]])
            w = torch.softmax(q_t[h * group:(h + 1) * group, 0] @ keys.T / math.sqrt(k.shape[-1]), -1)
            got = run.decode_out[0][layer][0, h * group:(h + 1) * group, 0].double()
            torch.testing.assert_close(got, w @ values, atol=1e-5, rtol=0)
