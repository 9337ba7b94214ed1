"""TOVA's defining rule on tiny tensors: with page 1, no sink and a one-token window the policy attends what
schwartz-lab-NLP/TOVA's cache keeps (src/tova_cache.py:41-51, reduce after every attention: the top
cache_size keys by the last query's fp32 probabilities averaged over every query head of the layer, one set
for all KV heads; cache_size = budget_tokens - 1), written out here independently."""

from __future__ import annotations

import math

import torch
from test_policy_conformance import SHAPE, make_episode, run_policy

from freekv_runtime.config import RuntimeConfig

BUDGET = 12


def _tova_reference(prompt: tuple, steps: list, cache_size: int) -> list[torch.Tensor]:
    """One layer of one sequence under TOVA: the decode outputs (Hq, 1, d) per step."""
    q, k, v = prompt  # (Hq, T, d), (Hkv, T, d)
    group = q.shape[0] // k.shape[0]

    def probs(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:  # (Hq, d), (Hkv, N, d) -> (Hq, N)
        scores = (query[:, None] * keys.repeat_interleave(group, 0)).sum(-1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores.double(), dim=-1)

    def reduce(weights: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):  # noqa: ANN202
        if keys.shape[1] <= cache_size:
            return keys, values
        kept = torch.sort(torch.topk(weights.mean(0), cache_size).indices).values
        return keys[:, kept], values[:, kept]

    keys, values = reduce(probs(q[:, -1], k), k, v)  # the last prompt query's attention
    outs = []
    for q_t, k_t, v_t in steps:
        keys, values = torch.cat([keys, k_t], 1), torch.cat([values, v_t], 1)
        weights = probs(q_t[:, 0], keys)
        outs.append((weights[:, None, :] @ values.repeat_interleave(group, 0).double())[:, 0])
        keys, values = reduce(weights, keys, values)
    return outs


def test_tova_attends_what_its_cache_keeps() -> None:
    config = RuntimeConfig(method="tova", page_size=1, budget_tokens=BUDGET, sink_tokens=0, window_tokens=1,
                           dense_layers=())
    episode = make_episode(SHAPE, 30, 10, seed=3)
    run = run_policy(config, [episode])
    for layer in range(SHAPE.n_layers):
        want = _tova_reference(episode.prompt[layer], [s[layer] for s in episode.steps], BUDGET - 1)
        for t, ref in enumerate(want):
            torch.testing.assert_close(run.decode_out[t][layer][0, :, 0].double(), ref, atol=1e-5, rtol=0)
            assert (run.steps[t].attended_tokens[0, layer] == BUDGET).all()
