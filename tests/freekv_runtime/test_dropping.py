"""Dropping policies (StreamingLLM, H2O, SnapKV, RaaS): each method's defining behaviour on random tensors.

The conformance suite (test_policy_conformance.py) covers budget, determinism, batching and the
full-budget case; here each method's kept set is checked against an independent float64 computation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_policy_conformance import SHAPE, config_for, dense_reference, make_episode, run_policy

from freekv_runtime.config import RuntimeConfigError
from freekv_runtime.policies import make_policy

PROMPT, STEPS, SPARSE = 83, 6, 1  # layer 1 is sparse (layer 0 dense)


def _prompt(episode, layer):
    q, k, v = episode.prompt[layer]
    return q[None], k[None], v[None]  # (1, Hq, T, d), (1, Hkv, T, d)


def _causal_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """float64 causal attention probabilities (Hkv, G, T, T) of one sequence's prompt."""
    hq, t, d = q.shape
    hkv = k.shape[0]
    s = q.double().reshape(hkv, hq // hkv, t, d) @ k.double()[:, None].transpose(-1, -2) / math.sqrt(d)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


def _kept(run, layer: int = SPARSE) -> np.ndarray:
    return run.state.keep[layer][0].cpu().numpy()  # (Hkv, N)


def _check_outputs_over_kept(run, episode, config) -> None:
    """The last step's output of the sparse layer is dense attention over exactly the kept tokens."""
    q, k, v = episode.prompt[SPARSE]
    ks = torch.cat([k] + [s[SPARSE][1] for s in episode.steps], dim=1)
    vs = torch.cat([v] + [s[SPARSE][2] for s in episode.steps], dim=1)
    keep = run.state.keep[SPARSE][0]
    group = SHAPE.group_size
    q_last = episode.steps[-1][SPARSE][0]  # (Hq, 1, d)
    for h in range(SHAPE.n_kv_heads):
        tok = keep[h].nonzero().flatten()
        heads = slice(h * group, (h + 1) * group)
        kv = slice(h, h + 1)
        ref = dense_reference(q_last[None, heads], ks[None, kv, tok], vs[None, kv, tok], causal=False)
        torch.testing.assert_close(run.decode_out[-1][SPARSE][0, h * group:(h + 1) * group].double(), ref[0],
                                   atol=1e-5, rtol=0)


def test_streamingllm_attends_exactly_sink_and_recent() -> None:
    config = config_for("streamingllm", budget_tokens=64, sink_tokens=8, window_tokens=16)
    episode = make_episode(SHAPE, PROMPT, STEPS, seed=11)
    run = run_policy(config, [episode])
    n = PROMPT + STEPS
    expected = np.zeros(n, bool)
    expected[:8] = True
    expected[n - (64 - 8):] = True
    for h in range(SHAPE.n_kv_heads):
        np.testing.assert_array_equal(_kept(run)[h], expected)
    assert (run.steps[-1].attended_tokens[0, SPARSE] == 64).all()
    assert (run.steps[-1].attended_tokens[0, 0] == n).all()  # the dense layer
    _check_outputs_over_kept(run, episode, config)


def test_h2o_keeps_the_top_accumulated_attention_tokens() -> None:
    """At step 0 the eviction uses the prompt's accumulated attention: kept = sink + window + the top
    budget - sink - window tokens by the causal attention each token received, summed over queries and the
    group's heads (float64 here, independently)."""
    config = config_for("h2o", budget_tokens=48, sink_tokens=8, window_tokens=16)
    episode = make_episode(SHAPE, PROMPT, 1, seed=12)
    run = run_policy(config, [episode])
    q, k, _ = episode.prompt[SPARSE]
    acc = _causal_probs(q, k).sum(dim=(1, 2))  # (Hkv, T)
    n = PROMPT + 1
    for h in range(SHAPE.n_kv_heads):
        middle = torch.arange(8, n - 16)
        middle = middle[middle < PROMPT]
        top = middle[acc[h, middle].argsort(descending=True)[: 48 - 8 - 16]]
        expected = np.zeros(n, bool)
        expected[:8] = True
        expected[n - 16:] = True
        expected[top.numpy()] = True
        np.testing.assert_array_equal(_kept(run)[h], expected)


def test_h2o_accumulates_decode_attention_and_stays_within_budget() -> None:
    config = config_for("h2o", budget_tokens=48, sink_tokens=8, window_tokens=16)
    episode = make_episode(SHAPE, PROMPT, STEPS, seed=13)
    run = run_policy(config, [episode])
    score = run.state.score[SPARSE][0]
    assert score.shape[1] == PROMPT + STEPS
    prompt_only = _causal_probs(*episode.prompt[SPARSE][:2]).sum(dim=(1, 2))
    assert (score[:, :PROMPT].double() >= prompt_only - 1e-4).all()  # decode attention only adds
    assert (score[:, :PROMPT].double() > prompt_only + 1e-4).any()
    assert (run.steps[-1].attended_tokens[0, SPARSE] == 48).all()
    _check_outputs_over_kept(run, episode, config)


@pytest.mark.parametrize("pooling", ["avg", "max"])
def test_snapkv_keeps_the_observation_windows_top_pooled_votes(pooling: str) -> None:
    obs, kernel = 8, 5
    config = config_for("snapkv", budget_tokens=48, sink_tokens=8, window_tokens=16,
                        knobs={"observation_tokens": obs, "kernel_size": kernel, "pooling": pooling,
                               "selection": "per-kv-head"})  # per query head: test_snapkv_selection.py
    episode = make_episode(SHAPE, PROMPT, 1, seed=14)
    run = run_policy(config, [episode])
    q, k, _ = episode.prompt[SPARSE]
    votes = _causal_probs(q, k)[:, :, PROMPT - obs:].sum(dim=(1, 2))[:, : PROMPT - obs]  # (Hkv, prefix)
    pooled = (F.avg_pool1d(votes[:, None], kernel, 1, kernel // 2) if pooling == "avg"
              else F.max_pool1d(F.pad(votes[:, None], (kernel // 2,) * 2), kernel, 1))[:, 0]
    n = PROMPT + 1
    for h in range(SHAPE.n_kv_heads):
        expected = np.zeros(n, bool)
        expected[:8] = True
        expected[n - 16:] = True
        window_obs = np.arange(PROMPT - obs, PROMPT)
        expected[window_obs] = True  # the observation window is kept before any prefix token
        free = 48 - int(expected.sum())
        middle = np.arange(8, min(PROMPT - obs, n - 16))
        # drop the lowest; ties (plateaus of max pooling) drop the older token first
        order = np.argsort(pooled[h, middle].numpy(), kind="stable")
        expected[middle[order[len(middle) - free:]]] = True
        np.testing.assert_array_equal(_kept(run)[h], expected)


def test_snapkv_decisions_are_fixed_after_prefill() -> None:
    """Generated tokens leave with the window; the prompt tokens kept at step 0 are kept at every step."""
    config = config_for("snapkv", budget_tokens=48, sink_tokens=8, window_tokens=16,
                        knobs={"observation_tokens": 8, "selection": "per-kv-head"})
    episode = make_episode(SHAPE, PROMPT, 20, seed=15)
    run = run_policy(config, [episode])
    kept = _kept(run)
    n = PROMPT + 20
    assert not kept[:, PROMPT:n - 16].any()  # generated tokens out of the window: dropped
    assert kept[:, n - 16:].all()
    assert (kept.sum(-1) == 48).all()
    _check_outputs_over_kept(run, episode, config)


def test_raas_drops_the_page_attended_least_recently() -> None:
    """The harness variant (budget over the prompt too). Pages whose keys every query attends keep fresh
    timestamps and survive; dropped pages are always
    whole pages and the held candidate pages never exceed (budget - sink - window) / page_size."""
    p = 8
    config = config_for("raas", page_size=p, budget_tokens=48, sink_tokens=8, window_tokens=16,
                        knobs={"alpha": 0.05, "group": "max", "prompt": "harness"})
    episode = make_episode(SHAPE, PROMPT, 12, seed=16)
    hot = 3  # page 3 (tokens 24..31): keys made to align with every query of the sparse layer
    q, k, v = episode.prompt[SPARSE]
    direction = torch.zeros(SHAPE.head_dim)
    direction[0] = 1.0
    k[:, hot * p:(hot + 1) * p] = 4 * direction
    q += 3 * direction  # every query, prompt and decode, looks along `direction`
    for step in episode.steps:
        step[SPARSE][0][:] = step[SPARSE][0] + 3 * direction
    run = run_policy(config, [episode])
    kept = _kept(run)
    n = PROMPT + 12
    assert kept[:, hot * p:(hot + 1) * p].all()  # the always-important page survives
    cur = (n - 1) // p
    for h in range(SHAPE.n_kv_heads):
        full = kept[h, : cur * p].reshape(cur, p)
        assert (full.all(-1) | ~full.any(-1)).all()  # whole pages
        candidates = full.any(-1)[1:cur - 2 + 1]  # between the sink page and the window pages
        assert candidates.sum() <= (48 - 8 - 16) // p
    _check_outputs_over_kept(run, episode, config)
    stamps = run.state.stamp[SPARSE][0]
    assert (stamps[:, hot] == 12).all()  # refreshed at the last step


@pytest.mark.parametrize(("method", "extra", "message"), [
    ("streamingllm", {"window": 4}, "'window' is not a knob of streamingllm"),
    ("h2o", {"heavy": 4}, "'heavy' is not a knob of h2o"),
    ("h2o", {"group_consistent": False}, "group_consistent is a simulator knob .* of h2o, not read by the "
     "runtime"),
    ("snapkv", {"kernel_size": 4}, "snapkv knob kernel_size must be an odd integer >= 1, got 4"),
    ("snapkv", {"pooling": "sum"}, "snapkv knob pooling must be one of avg, max, got 'sum'"),
    ("raas", {"alpha": 1.5}, r"raas knob alpha must be a number in \(0, 1\), got 1.5"),
    ("raas", {"group": "min"}, "raas knob group must be one of max, mean"),
])
def test_bad_knobs_are_refused_with_the_key_named(method: str, extra: dict, message: str) -> None:
    with pytest.raises(RuntimeConfigError, match=message):
        make_policy(config_for(method, knobs=extra))


def test_masked_decode_matches_sdpa_over_the_kept_tokens() -> None:
    from freekv_runtime.policies._dropping import masked_decode

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 6, 1, 16, generator=g), torch.randn(2, 2, 30, 16, generator=g), \
        torch.randn(2, 2, 30, 16, generator=g)
    keep = torch.rand(2, 2, 30, generator=g) > 0.4
    out, probs = masked_decode(q, k, v, keep)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                         attn_mask=keep.repeat_interleave(3, 1)[:, :, None])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert (probs[~keep[:, :, None].expand_as(probs)] == 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 3))


@pytest.mark.parametrize("method", ["streamingllm", "h2o", "snapkv", "raas"])
def test_trace_of_a_dropping_policy_reports_no_checks_no_recalls(tmp_path, method: str) -> None:
    """Through run_trace (random weights, 2 layers): the trace records the attended tokens within the
    budget, and traces.stats reports correction and hit rates as not applicable (None) and no recall."""
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec
    from traces.reader import TraceReader

    runtime = RuntimeConfig(method=method, page_size=16, budget_tokens=96, sink_tokens=16, window_tokens=32)
    outcome = run_trace(TraceRequest(
        model="smollm2-135m", task=TaskSpec("passkey", context_tokens=320, n_samples=1, decode_tokens=4),
        runtime=runtime, out_dir=tmp_path / "run", device="cpu", random_weights=0, layers=2,
        random_init="cpu"))
    s = outcome.summary
    assert s["correction_rate"] is None and s["hit_rate"] is None
    assert s["missed_pages_per_step"] == 0 and s["recall_bytes_per_step"] == 0
    reader = TraceReader(outcome.trace_dir)
    assert reader.meta.runtime["method"] == method
    for rec in reader.steps():
        # RaaS keeps the prompt whole: its budget bounds the decoded tokens (budget - sink)
        limit = 96 if method != "raas" else rec.context_tokens - rec.step - 1 + 96 - 16
        assert (rec.attended_tokens[1] <= limit).all()
        assert (rec.attended_tokens[0] == rec.context_tokens).all()
        assert not np.asarray(rec.corrected).any()
