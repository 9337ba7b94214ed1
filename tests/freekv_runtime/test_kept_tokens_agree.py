"""The runtime's RaaS and RazorAttention policies and the simulator's models keep the same number of
tokens for the same knobs: both read traces/kept_tokens.py, and the policies' attended counts (run on
tiny tensors through the conformance suite's driver) match it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from freekv_runtime.config import RuntimeConfig
from sim.config import SimConfig
from sim.methods import get_method
from tests.freekv_runtime.test_policy_conformance import SHAPE, make_episode, run_policy
from traces.kept_tokens import raas_kept_tokens, razor_bounded_tokens, razor_s0, razor_window_tokens


def test_rules_by_hand() -> None:
    # RaaS as published: prompt 600 kept, budget 128 - sink 16 = 112 decoded tokens at most
    assert raas_kept_tokens(650, 600, 128, 16) == 650
    assert raas_kept_tokens(800, 600, 128, 16) == 712
    assert raas_kept_tokens(100, 60, 128, 16) == 100  # never fewer than min(N, budget)
    assert raas_kept_tokens(800, 600, 128, 16, "harness") == 128
    assert list(raas_kept_tokens(np.array([10, 700, 900]), 600, 128, 16)) == [10, 700, 712]
    # RazorAttention: S0 = 128 - 16 - 1 = 111; window max(111, ceil(N / 5))
    assert razor_s0(128, 16) == 111
    assert razor_window_tokens(500, 128, 16) == 111 and razor_window_tokens(1000, 128, 16) == 200
    assert razor_window_tokens(1000, 128, 16, "budget") == 111
    assert razor_bounded_tokens(100, 128, 16) == 100  # nothing dropped: no compensation token
    assert razor_bounded_tokens(1000, 128, 16) == 16 + 200 + 1
    assert razor_bounded_tokens(1000, 128, 16, compensation=False) == 216
    with pytest.raises(ValueError, match="window_rule"):
        razor_window_tokens(10, 128, 16, "nope")


RAZOR_KNOBS = {"compression_ratio": 4.0}


def _sparse_layers(config: RuntimeConfig) -> list[int]:
    return [layer for layer in range(SHAPE.n_layers) if layer not in config.dense_layers]


def test_razorattention_runtime_keeps_the_shared_count() -> None:
    config = RuntimeConfig(method="razorattention", budget_tokens=24, page_size=1, sink_tokens=4,
                           window_tokens=1, knobs=RAZOR_KNOBS)
    prompt, steps = 90, 12  # ceil(N / 4) > S0 = 19 from N = 77 on: the window grows with N
    run = run_policy(config, [make_episode(SHAPE, prompt, steps, seed=2)])
    retrieval = np.asarray(run.state.unbudgeted_heads, dtype=bool)
    checked = 0
    for t, dec in enumerate(run.steps):
        n = prompt + t + 1
        want = razor_bounded_tokens(n, 24, 4, "paper", 4.0, True)
        for layer in _sparse_layers(config):
            for h in range(SHAPE.n_kv_heads):
                got = int(np.asarray(dec.attended_tokens)[0, layer, h])
                if retrieval[layer, h]:
                    assert got == n
                else:
                    assert got == want, (t, layer, h, got, want)
                    checked += 1
    assert checked > 0  # some head is not a retrieval head
    cfg = SimConfig(model="llama-3.1-8b", hardware="a100-40g-pcie4", method="razorattention",
                    input_tokens=prompt, output_tokens=steps, budget_tokens=24, sink_tokens=4,
                    page_size=1, window_tokens=1, method_options=RAZOR_KNOBS)
    model = get_method(cfg)
    n = np.arange(prompt + 1, prompt + steps + 1)
    want = [razor_bounded_tokens(int(x), 24, 4, "paper", 4.0) for x in n]
    assert list(model.bounded_tokens(n, cfg)) == want


def test_raas_runtime_stays_within_the_shared_count_and_the_simulator_prices_it() -> None:
    budget, page, sink, window = 32, 4, 4, 8
    config = RuntimeConfig(method="raas", budget_tokens=budget, page_size=page, sink_tokens=sink,
                           window_tokens=window)
    prompt, steps = 41, 60  # decoded tokens pass budget - sink = 28: eviction runs
    run = run_policy(config, [make_episode(SHAPE, prompt, steps, seed=5)])
    cfg = SimConfig(model="llama-3.1-8b", hardware="a100-40g-pcie4", method="raas", input_tokens=prompt,
                    output_tokens=steps, budget_tokens=budget, page_size=page, sink_tokens=sink,
                    window_tokens=window)
    model = get_method(cfg)
    evicting = 0
    for t, dec in enumerate(run.steps):
        n = prompt + t + 1
        rule = raas_kept_tokens(n, prompt, budget, sink)
        assert model.kept(n, cfg) == rule  # the simulator prices the runtime's rule
        got = np.asarray(dec.attended_tokens)[0, _sparse_layers(config)]
        # whole decoded pages are dropped: the runtime holds the rule's count less at most a page's slack
        assert (got <= rule).all() and (got > rule - page - 1).all(), (t, got, rule)
        evicting += int(rule < n)
    assert evicting > 10
    assert math.isclose(float(model.kept(10_000, cfg)), prompt + budget - sink)
