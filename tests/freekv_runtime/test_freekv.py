"""FreeKV-specific behaviour on random tensors (CPU; the CUDA stream path is not exercised here).

The driver keeps the truth (every key and value per layer) and, after each layer's decode, the pages
the policy attended (`state.tables[l].pages`). Checks recompute what FreeKV must do independently:
summaries from the truth with amin/amax, scores and top-k with the kernel references, attention over
the attended tokens in float64.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies import make_policy
from freekv_runtime.policies.base import AttentionShape, StepDecisions
from freekv_runtime.timing import OpTimer
from kernels import page_scores_reference, topk_pages_reference

CPU = torch.device("cpu")
D = 16
SINK, WINDOW, SELECTED = 1, 2, 3  # pages
ATOL = 1e-5  # fp32 runtime vs float64 attention over the same tokens


def config_for(p: int, tau: float, **kw) -> RuntimeConfig:
    knobs = {"tau": tau, **kw.pop("knobs", {})}
    return RuntimeConfig(method="freekv", page_size=p, sink_tokens=SINK * p, window_tokens=WINDOW * p,
                         budget_tokens=(SINK + WINDOW + SELECTED) * p, dense_layers=(0,), knobs=knobs, **kw)


@dataclass
class Drive:
    """Everything observed. q[t][l] (b, Hq, d); keys/values[l] (b, Hkv, n, d) the truth at the end;
    out[t][l] (b, Hq, d); pages[t][l][i][h] attended page ids (sparse layers); bytes[t] recalled at t."""

    shape: AttentionShape
    config: RuntimeConfig
    prompt_tokens: int
    q_prompt_last: list[torch.Tensor]
    q: list[list[torch.Tensor]] = field(default_factory=list)
    out: list[list[torch.Tensor]] = field(default_factory=list)
    pages: list[list[list | None]] = field(default_factory=list)
    steps: list[StepDecisions] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    initial: list = field(default_factory=list)
    timings: list[dict[str, float]] = field(default_factory=list)


def drive(config: RuntimeConfig, group: int, prompt_tokens: int, n_steps: int, batch: int = 2,
          seed: int = 0, device: torch.device = CPU) -> Drive:
    """Prefill + n_steps decode steps of a 2-layer model (layer 0 dense) on random tensors.

    Inputs are drawn on the CPU (same numbers on any device) and moved to `device`; the truth and the
    observations are kept on the CPU."""
    shape = AttentionShape(n_layers=2, n_qo_heads=2 * group, n_kv_heads=2, head_dim=D)
    g = torch.Generator().manual_seed(seed)
    hq, hkv = shape.n_qo_heads, shape.n_kv_heads
    sigma = 0.2 + torch.rand(batch, hq, 1, generator=g)  # per-head query drift between steps
    timer = OpTimer(device)
    state = make_policy(config).new_state(shape, batch, device, torch.float32, timer)
    run = Drive(shape, config, prompt_tokens, [])
    for layer in range(shape.n_layers):
        q = torch.randn(batch, hq, prompt_tokens, D, generator=g)
        k, v = (torch.randn(batch, hkv, prompt_tokens, D, generator=g) for _ in range(2))
        state.prefill(layer, q.to(device), k.to(device), v.to(device))
        run.q_prompt_last.append(q[:, :, -1])
        run.keys.append(k)
        run.values.append(v)
    run.initial = state.end_prefill().initial_selected
    timer.collect()
    q_prev = list(run.q_prompt_last)
    for _ in range(n_steps):
        bytes_before = state.recall_stats.recalled_bytes
        qs, outs, pages = [], [], []
        for layer in range(shape.n_layers):
            q_prev[layer] = q_prev[layer] + sigma * torch.randn(batch, hq, D, generator=g)
            k, v = (torch.randn(batch, hkv, 1, D, generator=g) for _ in range(2))
            run.keys[layer] = torch.cat([run.keys[layer], k], dim=2)
            run.values[layer] = torch.cat([run.values[layer], v], dim=2)
            out = state.decode(layer, q_prev[layer][:, :, None].to(device), k.to(device), v.to(device))
            outs.append(out[:, :, 0].cpu())
            qs.append(q_prev[layer])
            table = state.tables[layer]
            sparse = layer not in config.dense_layers
            pages.append([[h.copy() for h in s] for s in table.pages] if sparse else None)
        run.q.append(qs)
        run.out.append(outs)
        run.pages.append(pages)
        run.steps.append(state.end_step())
        run.bytes.append(state.recall_stats.recalled_bytes - bytes_before)
        run.timings.append(timer.collect())
    return run


def n_context(run: Drive, t: int) -> int:
    return run.prompt_tokens + t + 1


def sink_and_window(run: Drive, t: int) -> set[int]:
    cur = (n_context(run, t) - 1) // run.config.page_size
    return set(range(min(SINK, cur + 1))) | set(range(max(SINK, cur - WINDOW + 1), cur + 1))


def attended_selected(run: Drive, t: int, layer: int, i: int, h: int) -> set[int]:
    return set(run.pages[t][layer][i][h].tolist()) - sink_and_window(run, t)


def fresh_selection(run: Drive, t: int, layer: int) -> np.ndarray:
    """Top pages (b, Hkv, k) for q_t from summaries recomputed from the truth (sink/window excluded)."""
    p, n = run.config.page_size, n_context(run, t)
    keys = run.keys[layer][:, :, :n]
    b, hkv = keys.shape[:2]
    n_full = n // p
    pages = keys[:, :, : n_full * p].reshape(b, hkv, n_full, p, D)
    lo, hi = SINK, max(SINK, (n - 1) // p - WINDOW + 1)
    bounds = [torch.full((b,), x, dtype=torch.int32) for x in (lo, hi)]
    kmin, kmax = pages.amin(3), pages.amax(3)
    if run.config.knobs.page_summary == "box":  # centre +- mean radius (kernels.summarize_pages)
        centre = (kmin + kmax) / 2
        radius = (pages - centre[:, :, :, None]).abs().mean(3)
        kmin, kmax = centre - radius, centre + radius
    scores = page_scores_reference(run.q[t][layer], kmin, kmax, *bounds, run.config.knobs.group_pooling)
    return topk_pages_reference(scores, min(SELECTED, hi - lo)).numpy()


def check_outputs_attend_listed_pages(run: Drive) -> None:
    """Every query head's output is dense attention over exactly its KV head's listed pages' tokens."""
    p, group = run.config.page_size, run.shape.group_size
    for t in range(len(run.steps)):
        n = n_context(run, t)
        for layer in range(run.shape.n_layers):
            if run.pages[t][layer] is None:
                continue
            for i, heads in enumerate(run.pages[t][layer]):
                for h, pages in enumerate(heads):
                    tok = np.concatenate([np.arange(pg * p, min(n, (pg + 1) * p)) for pg in pages])
                    k = run.keys[layer][i, h, tok].double()
                    v = run.values[layer][i, h, tok].double()
                    q = run.q[t][layer][i, h * group : (h + 1) * group].double()  # the group's query heads
                    ref = torch.softmax(q @ k.T / math.sqrt(D), dim=-1) @ v
                    out = run.out[t][layer][i, h * group : (h + 1) * group].double()
                    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
                    assert run.steps[t].attended_tokens[i, layer, h] == len(tok)


CASES = [(8, 1), (16, 3), (32, 4), (64, 3)]  # (page size, group size)


@pytest.mark.parametrize(("p", "group"), CASES)
def test_tau_one_corrects_every_head_with_a_fresh_selection(p: int, group: int) -> None:
    run = drive(config_for(p, tau=1.0), group, prompt_tokens=12 * p - 2, n_steps=5)
    for t, dec in enumerate(run.steps):
        assert dec.corrected[:, 1].all() and not dec.corrected[:, 0].any()
        fresh = fresh_selection(run, t, 1)
        for i in range(2):
            for h in range(2):
                np.testing.assert_array_equal(dec.selected[i][1][h], np.sort(fresh[i, h]))
                assert attended_selected(run, t, 1, i, h) == set(fresh[i, h].tolist())
    check_outputs_attend_listed_pages(run)


@pytest.mark.parametrize("pooling", ["softmax_mean", "softmax_scaled_mean", "mean", "max"])
@pytest.mark.parametrize("summary", ["minmax", "box"])
def test_selection_design_knobs_select_by_their_own_scores(pooling: str, summary: str) -> None:
    """Every (group_pooling, page_summary): a corrected head attends the top pages under that design's
    scores, computed independently from the true keys."""
    p, group = 8, 3
    run = drive(config_for(p, tau=1.0, knobs={"group_pooling": pooling, "page_summary": summary}), group,
                prompt_tokens=12 * p - 2, n_steps=3)
    for t, dec in enumerate(run.steps):
        fresh = fresh_selection(run, t, 1)
        for i in range(2):
            for h in range(2):
                np.testing.assert_array_equal(dec.selected[i][1][h], np.sort(fresh[i, h]))
    check_outputs_attend_listed_pages(run)


def test_selection_design_changes_decisions() -> None:
    """The designs are not aliases: on this input some pooling/summary choices select other pages."""
    p, group = 8, 4
    picks = {}
    for pooling, summary in [("softmax_mean", "minmax"), ("softmax_scaled_mean", "minmax"), ("mean", "box")]:
        run = drive(config_for(p, tau=1.0, knobs={"group_pooling": pooling, "page_summary": summary}), group,
                    prompt_tokens=24 * p - 2, n_steps=3)
        picks[pooling, summary] = [[h.tolist() for h in d.selected[0][1]] for d in run.steps]
    assert len({str(v) for v in picks.values()}) > 1


@pytest.mark.parametrize(("p", "group"), CASES)
def test_tau_minus_one_never_corrects_and_attends_last_steps_selection(p: int, group: int) -> None:
    run = drive(config_for(p, tau=-1.0), group, prompt_tokens=12 * p - 2, n_steps=5)
    for t, dec in enumerate(run.steps):
        assert not dec.corrected.any()
        fresh = np.sort(fresh_selection(run, t, 1), axis=-1)
        for i in range(2):
            for h in range(2):
                previous = run.initial[i][1][h] if t == 0 else run.steps[t - 1].selected[i][1][h]
                assert attended_selected(run, t, 1, i, h) == set(previous.tolist())
                # the selection made at this step (for step t+1) is still the fresh one with q_t
                np.testing.assert_array_equal(dec.selected[i][1][h], fresh[i, h])
    check_outputs_attend_listed_pages(run)


@pytest.mark.parametrize(("p", "group", "staging_pages"), [(8, 1, 1), (16, 3, 64), (32, 4, 2), (64, 3, 64)])
def test_mixed_correction_recalls_only_misses(p: int, group: int, staging_pages: int) -> None:
    """tau between the similarities: corrected heads attend this step's selection, the others the last
    step's; only pages not resident cross the link, bytes = misses x 2 x p x d x 4."""
    config = config_for(p, tau=0.85, knobs={"staging_pages": staging_pages})
    run = drive(config, group, prompt_tokens=12 * p - 2, n_steps=6, batch=3, seed=p + group)
    corrected_seen = 0
    for t, dec in enumerate(run.steps):
        n_missed = 0
        for i in range(3):
            for h in range(2):
                previous = run.initial[i][1][h] if t == 0 else run.steps[t - 1].selected[i][1][h]
                selected = dec.selected[i][1][h]
                expected = selected if dec.corrected[i, 1, h] else previous
                assert attended_selected(run, t, 1, i, h) == set(expected.tolist())
                np.testing.assert_array_equal(dec.missed[i][1][h], np.setdiff1d(selected, previous))
                n_missed += len(dec.missed[i][1][h])
        assert run.bytes[t] == n_missed * 2 * p * D * 4
        corrected_seen += int(dec.corrected.sum())
    assert 0 < corrected_seen < 6 * 3 * 2
    assert sum(run.bytes) > 0
    check_outputs_attend_listed_pages(run)


@pytest.mark.parametrize("p", [8, 16])
def test_context_shorter_than_budget_selects_every_candidate(p: int) -> None:
    """Fewer candidates than slots: all candidates are selected and attended, pages that leave the
    window included, so attention is dense."""
    run = drive(config_for(p, tau=0.85), 3, prompt_tokens=4 * p - 2, n_steps=p + 2)  # context <= budget
    for t in range(len(run.steps)):
        n = n_context(run, t)
        cur = (n - 1) // p
        for i in range(2):
            for h in range(2):
                assert set(run.pages[t][1][i][h].tolist()) == set(range(cur + 1))
                assert run.steps[t].attended_tokens[i, 1, h] == n
    assert sum(run.bytes) == 0  # everything was already on the device
    check_outputs_attend_listed_pages(run)


@pytest.mark.parametrize("p", [8, 16])
def test_no_correction_check_while_the_context_fits_the_budget(p: int) -> None:
    """While n_pages <= budget pages there is no check (similarity NaN = not checked, nothing corrected),
    no selection and no recall, even at tau 1 where every check corrects; the recorded selection is
    every candidate, none missed. The first step past the budget checks (and, at tau 1, corrects)."""
    budget = (SINK + WINDOW + SELECTED) * p
    prompt = budget - p // 2  # the last page of the budget is half full: fits for p // 2 steps
    run = drive(config_for(p, tau=1.0), 3, prompt_tokens=prompt, n_steps=p // 2 + 3)
    over = [t for t in range(len(run.steps)) if n_context(run, t) > budget]
    assert over and over[0] == p // 2  # context budget + 1: ceil((budget + 1) / p) > budget / p
    for t, dec in enumerate(run.steps):
        if t in over:
            assert dec.corrected[:, 1].all() and np.isfinite(dec.similarity[:, 1]).all()
            continue
        assert np.isnan(dec.similarity[:, 1]).all() and not dec.corrected.any()
        assert not {"correction_check", "select", "recall_sync", "recall_background"} & set(run.timings[t])
        cur = (n_context(run, t) - 1) // p
        for i in range(2):
            for h in range(2):
                np.testing.assert_array_equal(dec.selected[i][1][h], np.arange(SINK, cur - WINDOW + 1))
                assert len(dec.missed[i][1][h]) == 0
                assert run.steps[t].attended_tokens[i, 1, h] == n_context(run, t)
        assert run.bytes[t] == 0
    check_outputs_attend_listed_pages(run)


def test_similarity_step0_uses_last_prompt_query_and_dense_layers_are_dense() -> None:
    p = 8
    run = drive(config_for(p, tau=0.85, measure_attention_mass=True), 3, prompt_tokens=10 * p, n_steps=3)
    q0, q_last = run.q[0][1], run.q_prompt_last[1]  # (b, Hq, d)
    cos = torch.nn.functional.cosine_similarity(q0.double(), q_last.double(), dim=-1)  # (b, Hq)
    expected = cos.reshape(2, 2, 3).mean(-1).numpy()
    np.testing.assert_allclose(run.steps[0].similarity[:, 1], expected, atol=1e-6)
    np.testing.assert_array_equal(run.steps[0].corrected[:, 1], expected < 0.85)
    for t, dec in enumerate(run.steps):
        assert np.isnan(dec.similarity[:, 0]).all() and not dec.corrected[:, 0].any()
        assert (dec.attended_tokens[:, 0] == n_context(run, t)).all()
        assert all(len(dec.selected[i][0][h]) == 0 for i in range(2) for h in range(2))
        np.testing.assert_array_equal(dec.attention_mass[:, 0], 1.0)


def test_attention_mass_matches_an_independent_computation() -> None:
    p = 8
    run = drive(config_for(p, tau=0.85, measure_attention_mass=True), 3, prompt_tokens=10 * p + 5, n_steps=4)
    for t, dec in enumerate(run.steps):
        n = n_context(run, t)
        q = run.q[t][1].double().reshape(2, 2, 3, D)
        probs = torch.softmax(q @ run.keys[1][:, :, :n].double().transpose(-1, -2) / math.sqrt(D), dim=-1)
        for i in range(2):
            for h in range(2):
                pages = run.pages[t][1][i][h]
                tok = np.concatenate([np.arange(pg * p, min(n, (pg + 1) * p)) for pg in pages])
                expected = probs[i, h][:, tok].sum(-1).mean().item()
                assert dec.attention_mass[i, 1, h] == pytest.approx(expected, abs=1e-5)
                assert 0 < dec.attention_mass[i, 1, h] < 1


def test_timer_names_the_operations() -> None:
    run = drive(config_for(8, tau=0.85), 3, prompt_tokens=80, n_steps=4)
    seen = set().union(*run.timings)
    assert {"append_offload", "correction_check", "select", "attention", "recall_background"} <= seen
    corrected_steps = [t for t, dec in enumerate(run.steps) if dec.corrected.any()]
    assert corrected_steps and all("recall_sync" in run.timings[t] for t in corrected_steps)


def test_bad_selection_design_is_refused_with_the_field_named() -> None:
    with pytest.raises(RuntimeConfigError, match="freekv knob group_pooling must be one of softmax_mean"):
        config_for(8, 0.9, knobs={"group_pooling": "avgSM"})
    with pytest.raises(RuntimeConfigError, match="freekv knob page_summary must be one of minmax, box"):
        config_for(8, 0.9, knobs={"page_summary": "quest"})


def test_bad_configuration_is_refused_with_the_field_named() -> None:
    with pytest.raises(RuntimeConfigError, match="'stagin' is not a knob of freekv; valid knobs: "):
        make_policy(config_for(8, 0.9, knobs={"stagin": 4}))
    with pytest.raises(RuntimeConfigError, match="freekv knob staging_pages must be an integer >= 0"):
        make_policy(config_for(8, 0.9, knobs={"staging_pages": -1}))
    shape = AttentionShape(n_layers=2, n_qo_heads=4, n_kv_heads=2, head_dim=D)
    policy = make_policy(RuntimeConfig(page_size=8, budget_tokens=64, sink_tokens=8, window_tokens=16,
                                       dense_layers=(0, 5)))
    with pytest.raises(RuntimeConfigError, match="dense_layers"):
        policy.new_state(shape, 1, CPU, torch.float32, OpTimer(CPU))


@pytest.mark.gpu
@pytest.mark.parametrize("tau", [-1.0, 1.0])
def test_cuda_streams_path_matches_the_cpu_path(tau: float) -> None:
    """On a GPU: Triton kernels, pinned pool, offload/copy/convert streams and events make the same
    decisions and (to 1e-4) the same outputs as the synchronous CPU path. Skipped where no GPU exists."""
    config = config_for(16, tau=tau, knobs={"staging_pages": 2})
    cpu = drive(config, 3, prompt_tokens=12 * 16 - 2, n_steps=6)
    gpu = drive(config, 3, prompt_tokens=12 * 16 - 2, n_steps=6, device=torch.device("cuda"))
    for dec_c, dec_g in zip(cpu.steps, gpu.steps, strict=True):
        np.testing.assert_array_equal(dec_c.corrected, dec_g.corrected)
        for i in range(2):
            for h in range(2):
                np.testing.assert_array_equal(dec_c.selected[i][1][h], dec_g.selected[i][1][h])
                np.testing.assert_array_equal(dec_c.missed[i][1][h], dec_g.missed[i][1][h])
    assert cpu.bytes == gpu.bytes and sum(gpu.bytes) > 0
    for out_c, out_g in zip(cpu.out, gpu.out, strict=True):
        for a, b in zip(out_c, out_g, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    check_outputs_attend_listed_pages(gpu)


@pytest.mark.slow
def test_policy_through_the_triton_kernels_in_the_interpreter() -> None:
    """The Triton kernels (run by Triton's CPU interpreter) drive the same checks as the references.

    Triton picks interpreter or compiler when a kernel module is imported, so this runs the mixed-
    correction and short-context tests in a fresh process with TRITON_INTERPRET=1, FREEKV_FORCE_TRITON=1.
    """
    env = {**os.environ, "TRITON_INTERPRET": "1", "FREEKV_FORCE_TRITON": "1"}
    selection = "test_mixed_correction_recalls_only_misses and 8-1-1 or test_context_shorter and 8"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                           "-k", selection], env=env, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout
