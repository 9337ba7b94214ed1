"""PyramidKV's defining rule on tiny tensors: each layer keeps its own budget from PyramidKV's schedule
(Zefan-Cai/PyramidKV pyramidkv/pyramidkv_utils.py 205-220, worked out by hand below for a 4-layer model)
and its kept set is SnapKV's (the observation window's summed, pooled votes, top-k per KV head, the
window kept; avg pooling, as max pooling ties), written out here independently. With no sink and a
one-token recent window, the policy at the first decode step attends the compression at capacity
budget_l - 1 plus the token just appended."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from test_policy_conformance import make_episode, run_policy

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies.base import AttentionShape
from traces.layer_budgets import pyramid_layer_budgets

SHAPE4 = AttentionShape(n_layers=4, n_qo_heads=6, n_kv_heads=2, head_dim=16)
T, BUDGET, WINDOW, KERNEL = 100, 40, 8, 7
# B = 40 - 8 = 32 selected; min = 32 // 20 = 1, max = 64 - 1 = 63 (<= T - W = 92); steps = 62 // 3 = 20
BY_HAND = [63 + 8, 43 + 8, 23 + 8, 3 + 8]


def test_the_schedule_is_pyramidkvs() -> None:
    assert pyramid_layer_budgets(BUDGET, WINDOW, 4, T, beta=20) == BY_HAND
    # a prompt shorter than 2 (budget - window) or than the budget: SnapKV's uniform budget
    assert pyramid_layer_budgets(BUDGET, WINDOW, 4, 60, beta=20) == [BUDGET] * 4
    # max_num clipped to T - W: max = 70 - 8 = 62, min = 64 - 62 = 2, steps = 60 // 3 = 20
    assert pyramid_layer_budgets(BUDGET, WINDOW, 4, 70, beta=20) == [70, 50, 30, 10]


def _reference_step0(prompt: tuple, step: tuple, capacity: int) -> torch.Tensor:
    q, k, v = (x.double() for x in prompt)  # (Hq, T, d), (Hkv, T, d)
    hkv, group, d = k.shape[0], q.shape[0] // k.shape[0], q.shape[-1]
    kr = k.repeat_interleave(group, 0)
    scores = q[:, -WINDOW:] @ kr.transpose(-1, -2) / math.sqrt(d)  # (Hq, W, T)
    causal = torch.arange(T)[None, :] > torch.arange(T - WINDOW, T)[:, None]
    probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
    votes = probs.sum(1).reshape(hkv, group, T).sum(1)[:, : T - WINDOW]  # (Hkv, T - W)
    pooled = F.avg_pool1d(votes[:, None], KERNEL, stride=1, padding=KERNEL // 2)[:, 0]
    top = pooled.topk(capacity - WINDOW, dim=-1).indices  # (Hkv, k)
    q_t, k_t, v_t = (x.double() for x in step)
    outs = []
    for h in range(hkv):
        idx = torch.cat([top[h].sort().values, torch.arange(T - WINDOW, T)])
        keys, values = torch.cat([k[h, idx], k_t[h]]), torch.cat([v[h, idx], v_t[h]])
        w = torch.softmax(q_t[h * group:(h + 1) * group, 0] @ keys.T / math.sqrt(d), dim=-1)
        outs.append(w @ values)
    return torch.cat(outs)  # (Hq, d)


def test_each_layer_keeps_snapkvs_choice_at_its_pyramid_budget() -> None:
    config = RuntimeConfig(method="pyramidkv", page_size=1, budget_tokens=BUDGET, sink_tokens=0,
                           window_tokens=1, dense_layers=(),
                           knobs={"observation_tokens": WINDOW, "kernel_size": KERNEL, "pooling": "avg",
                                  "beta": 20})
    episode = make_episode(SHAPE4, T, 4, seed=11)
    run = run_policy(config, [episode], SHAPE4)
    for layer in range(SHAPE4.n_layers):
        want = _reference_step0(episode.prompt[layer], episode.steps[0][layer], BY_HAND[layer] - 1)
        torch.testing.assert_close(run.decode_out[0][layer][0, :, 0].double(), want, atol=1e-5, rtol=0)
        for step in run.steps:
            assert (step.attended_tokens[0, layer] == BY_HAND[layer]).all()
    assert run.state.unbudgeted_heads[:2].all() and not run.state.unbudgeted_heads[2:].any()
