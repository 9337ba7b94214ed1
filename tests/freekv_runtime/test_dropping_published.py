"""Dropping policies against their published rules, written out here step by step in float64.

H2O (FMInference/H2O modify_llama.py:317-326: attention summed over every query; kvpress
observed_attention_press.py:44-48: divided by the queries that saw each key), RaaS as published (arXiv
2502.11147: the prompt kept, decoded pages stamped when important, the stalest evicted) and the kept-token
API every dropping policy exposes. Each reference below is a plain loop over the method's rule, independent
of the policy's code; the policy must keep exactly the same tokens on every KV head.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, config_for, make_episode, run_policy

from freekv_runtime.policies import make_policy

SPARSE = 1  # layer 0 is dense in config_for


def _probs(q: torch.Tensor, k: torch.Tensor, keep: np.ndarray) -> torch.Tensor:
    """float64 attention of one query per query head (q (Hq, d)) over the kept tokens: (Hkv, G, N)."""
    hq, d = q.shape
    hkv = k.shape[0]
    s = q.double().reshape(hkv, hq // hkv, d) @ k.double().transpose(-1, -2) / math.sqrt(d)  # (Hkv, G, N)
    s = s.masked_fill(~torch.from_numpy(keep)[:, None], float("-inf"))
    return torch.softmax(s, dim=-1)


def _h2o_reference(episode, budget: int, sink: int, window: int, normalise: bool) -> np.ndarray:
    """H2O's rule for the sparse layer: score = attention received, summed over every query (prompt
    queries under the causal mask, then decode queries) and the group's heads; with `normalise`, divided
    by the queries that saw the token. Over budget: drop the lowest-scoring unprotected tokens (ties: the
    older first). Returns the kept mask (Hkv, N) after the last step."""
    q, k, _ = episode.prompt[SPARSE]
    hq, t, d = q.shape
    hkv = k.shape[0]
    s = q.double().reshape(hkv, hq // hkv, t, d) @ k.double()[:, None].transpose(-1, -2) / math.sqrt(d)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    score = torch.softmax(s, dim=-1).sum(dim=(1, 2)).numpy()  # (Hkv, T)
    seen = np.tile(np.arange(t, 0, -1, dtype=np.float64), (hkv, 1))
    keep = np.ones((hkv, t), bool)
    keys = k
    for step in episode.steps:
        qs, ks, _ = step[SPARSE]
        keys = torch.cat([keys, ks], dim=1)
        n = keys.shape[1]
        keep = np.concatenate([keep, np.ones((hkv, 1), bool)], axis=1)
        score = np.concatenate([score, np.zeros((hkv, 1))], axis=1)
        seen = np.concatenate([seen, np.zeros((hkv, 1))], axis=1)
        pos = np.arange(n)
        protected = (pos < sink) | (pos >= n - window)
        for h in range(hkv):
            while keep[h].sum() > budget:
                rank = score[h] / np.maximum(seen[h], 1.0) if normalise else score[h]
                cand = np.flatnonzero(keep[h] & ~protected)
                keep[h, cand[np.argsort(rank[cand], kind="stable")[0]]] = False
        probs = _probs(qs[:, 0], keys, keep)
        score = score + probs.sum(1).numpy()
        seen = seen + keep
    return keep


@pytest.mark.parametrize("normalise", [False, True])
def test_h2o_keeps_what_its_published_rule_keeps(normalise: bool) -> None:
    budget, sink, window = 40, 4, 8
    config = config_for(
        "h2o",
        budget_tokens=budget,
        sink_tokens=sink,
        window_tokens=window,
        page_size=4,
        knobs={"normalise": normalise},
    )
    episode = make_episode(SHAPE, 50, 14, seed=21)
    run = run_policy(config, [episode])
    expected = _h2o_reference(episode, budget, sink, window, normalise)
    np.testing.assert_array_equal(run.state.keep[SPARSE][0].numpy(), expected)


def test_h2o_sum_and_normalised_scores_keep_different_tokens() -> None:
    """The two rules are not the same on these tensors (the sum favours older tokens)."""
    sets = []
    for normalise in (False, True):
        config = config_for(
            "h2o",
            budget_tokens=40,
            sink_tokens=4,
            window_tokens=8,
            page_size=4,
            knobs={"normalise": normalise},
        )
        sets.append(run_policy(config, [make_episode(SHAPE, 50, 14, seed=21)]).state.keep[SPARSE][0])
    assert not torch.equal(sets[0], sets[1])
    held = [s.nonzero()[:, 1].double().mean().item() for s in sets]
    assert held[0] < held[1]  # summed scores keep older tokens on average


def test_h2o_warns_without_a_recent_window() -> None:
    notes = make_policy(config_for("h2o", budget_tokens=128, window_tokens=8)).config_notes()
    assert len(notes) == 1 and "window_tokens=8" in notes[0] and "degenerates" in notes[0]
    assert make_policy(config_for("h2o", budget_tokens=64, window_tokens=16)).config_notes() == []


def _raas_reference(episode, budget: int, sink: int, window: int, p: int, alpha: float) -> np.ndarray:
    """RaaS as published, for the sparse layer: every prompt token kept; decoded tokens in pages of p from
    T on; the newest `window` tokens kept; at most K = (budget - sink - window) // p whole decoded pages
    before the window held; a page is stamped with the step it appeared, restamped step + 1 whenever its
    attention (summed over its tokens, mean over the group) exceeds alpha; over K, the oldest stamp goes
    (ties: the lower page). Returns the kept mask (Hkv, N) after the last step."""
    _, k, _ = episode.prompt[SPARSE]
    hkv, t = k.shape[0], k.shape[1]
    k_pages = (budget - sink - window) // p
    keep = np.ones((hkv, t), bool)
    stamp: dict[tuple[int, int], float] = {}
    keys = k
    for step_i, step in enumerate(episode.steps):
        qs, ks, _ = step[SPARSE]
        keys = torch.cat([keys, ks], dim=1)
        n = keys.shape[1]
        keep = np.concatenate([keep, np.ones((hkv, 1), bool)], axis=1)
        n_pages = -(-(n - t) // p)
        for h in range(hkv):
            for j in range(n_pages):
                stamp.setdefault((h, j), float(step_i))
            whole = [j for j in range((n - t) // p) if t + (j + 1) * p <= n - window]
            held = [j for j in whole if keep[h, t + j * p]]
            while len(held) > k_pages:
                oldest = min(held, key=lambda j: (stamp[(h, j)], j))
                keep[h, t + oldest * p : t + (oldest + 1) * p] = False
                held.remove(oldest)
        probs = _probs(qs[:, 0], keys, keep).mean(1).numpy()  # (Hkv, N): mean over the group
        for h in range(hkv):
            for j in range(n_pages):
                if probs[h, t + j * p : t + (j + 1) * p].sum() > alpha:
                    stamp[(h, j)] = float(step_i + 1)
    return keep


@pytest.mark.parametrize("alpha", [1e-4, 0.03])
def test_raas_keeps_what_the_published_rule_keeps(alpha: float) -> None:
    budget, sink, window, p = 40, 4, 8, 4
    config = config_for(
        "raas",
        page_size=p,
        budget_tokens=budget,
        sink_tokens=sink,
        window_tokens=window,
        knobs={"alpha": alpha},
    )
    episode = make_episode(SHAPE, 45, 40, seed=22)
    run = run_policy(config, [episode])
    kept = run.state.keep[SPARSE][0].numpy()
    expected = _raas_reference(episode, budget, sink, window, p, alpha)
    np.testing.assert_array_equal(kept, expected)
    assert kept[:, :45].all()  # the prompt is kept whole
    decoded_pages = kept[:, 45 : 45 + 7 * p].reshape(SHAPE.n_kv_heads, 7, p)
    assert (decoded_pages.all(-1) | ~decoded_pages.any(-1)).all()  # whole decoded pages
    assert (kept[:, 45:].sum(-1) <= budget - sink).all()  # the budget bounds the decoded tokens


def test_raas_defaults_are_the_reference_harness() -> None:
    knobs = make_policy(config_for("raas")).config.knobs
    assert (knobs.alpha, knobs.group, knobs.prompt) == (1e-4, "mean", "keep")


def test_raas_harness_variant_cuts_the_prompt_to_the_budget() -> None:
    config = config_for(
        "raas", budget_tokens=40, sink_tokens=4, window_tokens=8, page_size=4, knobs={"prompt": "harness"}
    )
    run = run_policy(config, [make_episode(SHAPE, 45, 3, seed=23)])
    assert (run.steps[-1].attended_tokens[0, SPARSE] <= 40).all()
    assert not run.state.keep[SPARSE][0, :, :45].all()


@pytest.mark.parametrize("method", ["streamingllm", "h2o", "snapkv", "raas", "tova", "razorattention",
                                    "lazyeviction"])
def test_kept_token_indices_match_the_keep_mask(method: str) -> None:
    """The public kept-set API: per sequence and KV head, sorted positions of the tokens the layer holds;
    a dense layer holds every token."""
    config = config_for(method, budget_tokens=40, sink_tokens=4, window_tokens=8, page_size=4)
    episodes = [make_episode(SHAPE, 45, 5, seed=s) for s in (24, 25)]
    run = run_policy(config, episodes)
    n = 45 + 5
    for layer in range(SHAPE.n_layers):
        kept = run.state.kept_token_indices(layer)
        assert len(kept) == 2 and all(len(heads) == SHAPE.n_kv_heads for heads in kept)
        mask = run.state.kept_mask(layer).numpy()
        for b in range(2):
            for h in range(SHAPE.n_kv_heads):
                np.testing.assert_array_equal(kept[b][h], np.flatnonzero(mask[b, h]))
                if layer in config.dense_layers:
                    np.testing.assert_array_equal(kept[b][h], np.arange(n))
                assert kept[b][h].size == 0 or kept[b][h][-1] == n - 1  # the newest token is held


def test_h2o_note_reaches_the_trace_metadata_and_summary(tmp_path) -> None:
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec
    from traces.reader import TraceReader

    runtime = RuntimeConfig(method="h2o", page_size=16, budget_tokens=96, sink_tokens=16, window_tokens=16)
    outcome = run_trace(
        TraceRequest(
            model="smollm2-135m",
            task=TaskSpec("passkey", context_tokens=320, n_samples=1, decode_tokens=2),
            runtime=runtime,
            out_dir=tmp_path / "run",
            device="cpu",
            random_weights=0,
            layers=2,
            random_init="cpu",
        )
    )
    (note,) = outcome.summary["policy_notes"]
    assert "degenerates" in note
    assert TraceReader(outcome.trace_dir).meta.extra["policy_notes"] == [note]
