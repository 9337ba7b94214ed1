"""LazyEviction's defining rule on tiny tensors: with sink 0 and page 1 the policy attends what
Halo-949/LazyEviction's cache holds, written out here independently from its code (model/temp_cacheobs.py
record_recurrence, model/kv_utils.py update_kv_in_decoding: per query head, K/V repeated; the step attends
the cache before its eviction; every W-th step the W newest slots and the top max_kv_capacity - W others by
the MRI-centric importance are kept). Ties keep the newer token (the policy's documented tie-break)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, make_episode, run_policy

from freekv_runtime.config import RuntimeConfig
from traces.lazy_schedule import lazy_attended_tokens

BUDGET, W, ALPHA, PROMPT, STEPS = 24, 4, 0.03, 30, 40


def _importance(last: float, mri: float, step: int) -> float:
    s = 0.0 if mri == 0 else 2 / (1 + math.exp(mri - 1))
    x = 1 + (step - last) / (mri + 1e-5)
    return (0.0 if x > 700 else 2 / (1 + math.exp(x))) + s


def _lazy_reference(prompt: tuple, steps: list, rule: str) -> tuple[list[torch.Tensor], list[list[int]]]:
    """One layer of one sequence: the decode outputs (Hq, d) per step and each query head's token ids."""
    q, k, v = prompt  # (Hq, T, d), (Hkv, T, d)
    hq, t, d = q.shape
    group = hq // k.shape[0]
    capacity = BUDGET - W if rule == "peak" else BUDGET
    heads = [dict(k=k[h // group].double(), v=v[h // group].double(), ids=list(range(t)), last=None, mri=None)
             for h in range(hq)]
    outs = []
    for c, (q_t, k_t, v_t) in enumerate(steps, start=1):
        out = torch.zeros(hq, d, dtype=torch.float64)
        for h, head in enumerate(heads):
            head["k"] = torch.cat([head["k"], k_t[h // group].double()])
            head["v"] = torch.cat([head["v"], v_t[h // group].double()])
            head["ids"].append(t + c - 1)
            n = len(head["ids"])
            if head["last"] is None:  # first observation: zeros for every cached token
                head["last"], head["mri"] = [0.0] * n, [0.0] * n
            else:
                head["last"].append(float(c - 1))
                head["mri"].append(0.0)
            w = torch.softmax(head["k"] @ q_t[h, 0].double() / math.sqrt(d), dim=0)
            out[h] = w @ head["v"]
            for i in range(n):
                if w[i] >= ALPHA:
                    head["mri"][i] = max(head["mri"][i], c - head["last"][i])
                    head["last"][i] = float(c)
            next_due = (c // W + 1) * W
            due = c % W == 0 or (rule == "peak" and n + next_due - c > BUDGET)
            if n <= capacity or not due:
                continue
            old = range(n - W)  # every slot but the W newest
            score = [_importance(head["last"][i], head["mri"][i], c) for i in range(n)]
            ranked = sorted(old, key=lambda i: (score[i], head["ids"][i]))
            top = ranked[len(ranked) - (capacity - W):]
            slots = list(top) + list(range(n - W, n))
            head["k"], head["v"] = head["k"][slots], head["v"][slots]
            for key in ("ids", "last", "mri"):
                head[key] = [head[key][i] for i in slots]
        outs.append(out)
    return outs, [sorted(head["ids"]) for head in heads]


@pytest.mark.parametrize("rule", ["published", "peak"])
def test_lazyeviction_attends_what_its_cache_holds(rule: str) -> None:
    config = RuntimeConfig(method="lazyeviction", page_size=1, budget_tokens=BUDGET, sink_tokens=0,
                           window_tokens=W, dense_layers=(), knobs={"alpha": ALPHA, "budget_rule": rule})
    episode = make_episode(SHAPE, PROMPT, STEPS, seed=5)
    run = run_policy(config, [episode])
    schedule = lazy_attended_tokens(PROMPT, STEPS, BUDGET, W, rule)
    evicted_somewhere = False
    for layer in range(SHAPE.n_layers):
        want, ids = _lazy_reference(episode.prompt[layer], [s[layer] for s in episode.steps], rule)
        for t, ref in enumerate(want):
            torch.testing.assert_close(run.decode_out[t][layer][0, :, 0].double(), ref, atol=1e-5, rtol=0)
            assert (run.steps[t].attended_tokens[0, layer] == schedule[t]).all()
        own = run.state.own[layer][0].numpy()
        for h, head_ids in enumerate(ids):
            np.testing.assert_array_equal(np.flatnonzero(own[h]), head_ids)
        evicted_somewhere |= len({tuple(i) for i in ids}) > 1  # heads keep different tokens
    assert evicted_somewhere
    if rule == "peak":
        assert schedule[1:].max() <= BUDGET and schedule[0] == PROMPT + 1


def test_per_kv_head_variant_keeps_one_set_per_group() -> None:
    config = RuntimeConfig(method="lazyeviction", page_size=1, budget_tokens=BUDGET, sink_tokens=0,
                           window_tokens=W, dense_layers=(),
                           knobs={"alpha": ALPHA, "selection": "per-kv-head"})
    run = run_policy(config, [make_episode(SHAPE, PROMPT, STEPS, seed=6)])
    for layer in range(SHAPE.n_layers):
        assert run.state.own[layer].shape[1] == SHAPE.n_kv_heads
        assert (run.state.own[layer] == run.state.keep[layer]).all()
    assert (run.steps[-1].attended_tokens <= BUDGET).all()


def test_schedule_is_lagged() -> None:
    """published: the whole prompt until step W, then max_kv_capacity + 1 .. max_kv_capacity + W."""
    got = lazy_attended_tokens(100, 12, 40, 4, "published")
    assert got.tolist() == [101, 102, 103, 104, 41, 42, 43, 44, 41, 42, 43, 44]
    assert lazy_attended_tokens(100, 6, 40, 4, "peak").tolist() == [101, 37, 38, 39, 37, 38]
