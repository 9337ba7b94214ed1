"""Quest (and the always-correct retrieval both Quest and ArkVale use): defining behaviour on random tensors.

The conformance suite covers budget, determinism, batching and "a budget covering the context equals
dense". Here: every step's selection is the top pages of an independent float64 computation of Quest's
bound under the CURRENT query, per query head (Quest's code; each query head attends exactly sink + its
own pages + window, its KV head holds and recalls the group's union) or group pooled by max (selection
per-kv-head: attention over sink + selected + window), and the movement fields are the misses and the
replaced pages, step by step. The helpers are shared with
test_arkvale.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, config_for, dense_reference, make_episode

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies import make_policy
from freekv_runtime.policies._reuse import plan_reuse, replaced_pages
from freekv_runtime.policies.base import StepDecisions
from freekv_runtime.timing import OpTimer

PROMPT, STEPS, SPARSE = 83, 12, 1  # layer 1 is sparse (layer 0 dense); 12 steps cross a page boundary


@dataclass
class Step:
    decisions: StepDecisions
    resident_before: np.ndarray  # (Hkv, K) layer SPARSE's slot cache before the step
    resident_after: np.ndarray
    out: torch.Tensor  # (Hq, d) layer SPARSE's output
    q: torch.Tensor  # (Hq, d) layer SPARSE's query
    keys: torch.Tensor  # (Hkv, N, d) every key of layer SPARSE so far
    values: torch.Tensor
    query_pages: np.ndarray | None  # (Hq, k) each query head's own pages (per-query-head selection)


def drive(config: RuntimeConfig, seed: int = 3) -> list[Step]:
    """One sequence through prefill and STEPS decode steps, recording layer SPARSE step by step."""
    episode = make_episode(SHAPE, PROMPT, STEPS, seed)
    cpu = torch.device("cpu")
    state = make_policy(config).new_state(SHAPE, 1, cpu, torch.float32, OpTimer(cpu))
    for layer in range(SHAPE.n_layers):
        state.prefill(layer, *(x[None] for x in episode.prompt[layer]))
    state.end_prefill()
    keys, values = episode.prompt[SPARSE][1], episode.prompt[SPARSE][2]
    steps = []
    for layers in episode.steps:
        before = state.stores[SPARSE].resident[0].copy()
        outs = [state.decode(layer, *(x[None] for x in layers[layer])) for layer in range(SHAPE.n_layers)]
        q, k, v = layers[SPARSE]
        keys, values = torch.cat([keys, k], dim=1), torch.cat([values, v], dim=1)
        after = state.stores[SPARSE].resident[0].copy()
        own = state.stores[SPARSE].query_pages
        steps.append(Step(state.end_step(), before, after, outs[SPARSE][0, :, 0], q[:, 0], keys, values,
                          None if own is None else own[0].copy()))
    return steps


def page_bounds(keys: torch.Tensor, p: int, summary: str) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) (Hkv, n_full, d) float64 of the full pages: min/max, or ArkVale's centre +- mean radius."""
    k = keys.double().numpy()
    n_full = k.shape[1] // p
    pages = k[:, : n_full * p].reshape(k.shape[0], n_full, p, k.shape[2])
    lo, hi = pages.min(axis=2), pages.max(axis=2)
    if summary == "box":
        centre = (lo + hi) / 2
        radius = np.abs(pages - centre[:, :, None]).mean(axis=2)
        lo, hi = centre - radius, centre + radius
    return lo, hi


def oracle_scores(step: Step, config: RuntimeConfig, heads_per_selection: int = 1) -> np.ndarray:
    """(Hkv, n_full) float64 page scores under the step's query, -inf outside the candidates: the bound
    sum_i max(q_i hi_i, q_i lo_i) per query head, pooled over the GQA group (max or mean), then over
    `heads_per_selection` KV heads the same way."""
    p = config.page_size
    lo, hi = page_bounds(step.keys, p, config.knobs.page_summary)
    q = step.q.double().numpy().reshape(SHAPE.n_kv_heads, SHAPE.group_size, 1, -1)  # (Hkv, G, 1, d)
    bound = np.maximum(q * hi[:, None], q * lo[:, None]).sum(axis=-1)  # (Hkv, G, n_full)
    pool = {"max": np.max, "mean": np.mean}[config.knobs.group_pooling]
    scores = pool(bound, axis=1)
    g = heads_per_selection
    scores = np.repeat(pool(scores.reshape(-1, g, scores.shape[1]), axis=1), g, axis=0)
    cur = (step.keys.shape[1] - 1) // p
    candidate = np.zeros(scores.shape[1], dtype=bool)
    candidate[config.sink_pages: cur - config.window_pages + 1] = True
    return np.where(candidate, scores, -np.inf)


def top_pages(scores: np.ndarray, k: int) -> list[np.ndarray]:
    return [np.sort(np.argsort(-row, kind="stable")[:k]) for row in scores]


def attended_reference(step: Step, config: RuntimeConfig, pages: list[np.ndarray], query_heads: bool = False,
                       kv_head: int = 0) -> torch.Tensor:
    """float64 attention of the step's query over sink + `pages`[h] + window pages: (Hq, d). With
    query_heads, pages[g] are the own pages of query head g of KV head `kv_head`: (G, d)."""
    p, n = config.page_size, step.keys.shape[1]
    cur = (n - 1) // p
    out = []
    rows = [(kv_head, [g]) for g in range(len(pages))] if query_heads else \
        [(h, list(range(SHAPE.group_size))) for h in range(SHAPE.n_kv_heads)]
    for i, (h, members) in enumerate(rows):
        ids = np.concatenate([np.arange(config.sink_pages), pages[i],
                              np.arange(max(config.sink_pages, cur - config.window_pages + 1), cur + 1)])
        tokens = torch.as_tensor((ids[:, None] * p + np.arange(p)).ravel())
        tokens = tokens[tokens < n]
        heads = [h * SHAPE.group_size + m for m in members]
        qh = step.q[heads][None, :, None]
        out.append(dense_reference(qh, step.keys[h][None, None, tokens], step.values[h][None, None, tokens],
                                   causal=False)[0, :, 0])
    return torch.cat(out)


def check_movement(steps: list[Step], config: RuntimeConfig) -> None:
    """Per step and KV head: missed = selected pages not resident before; fetched = misses x p; evicted =
    held pages no longer resident x p; every head corrected, similarity NaN."""
    p = config.page_size
    for step in steps:
        dec = step.decisions
        assert dec.corrected[0, SPARSE].all() and np.isnan(dec.similarity[0, SPARSE]).all()
        for h in range(SHAPE.n_kv_heads):
            before, after = step.resident_before[h], step.resident_after[h]
            selected, missed = dec.selected[0][SPARSE][h], dec.missed[0][SPARSE][h]
            np.testing.assert_array_equal(missed, np.setdiff1d(selected, before))
            assert set(selected) <= set(after)
            assert dec.fetched_tokens[0, SPARSE, h] == len(missed) * p
            gone = np.setdiff1d(before[before >= 0], after)
            assert dec.evicted_tokens[0, SPARSE, h] == len(gone) * p
        assert dec.fetched_tokens[0, 0].sum() == 0 and dec.evicted_tokens[0, 0].sum() == 0  # dense layer


def query_head_scores(step: Step, config: RuntimeConfig) -> np.ndarray:
    """(Hq, n_full) float64: Quest's rule per query head (mit-han-lab/Quest evaluation/quest_attention.py
    :139-184): the bound sum_i max(q_i max_i, q_i min_i) of query head j against KV head j // G's pages,
    -inf outside the candidates; no pooling."""
    p = config.page_size
    lo, hi = page_bounds(step.keys, p, "minmax")
    q = step.q.double().numpy()  # (Hq, d)
    heads = np.arange(SHAPE.n_qo_heads) // SHAPE.group_size
    bound = np.maximum(q[:, None] * hi[heads], q[:, None] * lo[heads]).sum(axis=-1)  # (Hq, n_full)
    cur = (step.keys.shape[1] - 1) // p
    candidate = np.zeros(bound.shape[1], dtype=bool)
    candidate[config.sink_pages: cur - config.window_pages + 1] = True
    return np.where(candidate, bound, -np.inf)


def test_quest_selects_per_query_head_and_each_head_attends_only_its_own_pages() -> None:
    config = config_for("quest")
    assert config.knobs.selection == "per-query-head"  # Quest's code
    steps = drive(config)
    p, g = config.page_size, SHAPE.group_size
    moved = 0
    for step in steps:
        want = top_pages(query_head_scores(step, config), config.selected_pages)  # per query head
        assert step.query_pages is not None
        for j in range(SHAPE.n_qo_heads):
            np.testing.assert_array_equal(np.sort(step.query_pages[j]), want[j])
        for h in range(SHAPE.n_kv_heads):
            union = np.unique(np.concatenate(want[h * g:(h + 1) * g]))
            np.testing.assert_array_equal(step.decisions.selected[0][SPARSE][h], union)
            assert set(union) <= set(step.resident_after[h])
        out = torch.cat([attended_reference(step, config, [want[j] for j in range(h * g, (h + 1) * g)],
                                            query_heads=True, kv_head=h) for h in range(SHAPE.n_kv_heads)])
        torch.testing.assert_close(step.out.double(), out, atol=1e-5, rtol=1e-5)
        moved += int(step.decisions.fetched_tokens[0, SPARSE].sum())
        # misses: the union's pages not resident before the step, except the page that just left the
        # window (the store keeps it in an empty slot of the G x k slot cache, kv_store.py)
        left = (step.keys.shape[1] - 1) // p - config.window_pages
        for h in range(SHAPE.n_kv_heads):
            selected, missed = step.decisions.selected[0][SPARSE][h], step.decisions.missed[0][SPARSE][h]
            expect = np.setdiff1d(selected, step.resident_before[h])
            np.testing.assert_array_equal(missed, expect[expect != left])
            assert step.decisions.fetched_tokens[0, SPARSE, h] == len(missed) * p
    assert moved > 0


def test_quest_per_query_head_keeps_what_pooling_drops() -> None:
    """The two selections differ on this episode: pooling keeps one set for the group, so some query
    head loses a page of its own top-k (the audit's 74-86% overlap on real models)."""
    own = drive(config_for("quest"))
    pooled = drive(config_for("quest", knobs={"selection": "per-kv-head"}))
    g = SHAPE.group_size
    lost = 0
    for a, b in zip(own, pooled, strict=True):
        assert a.query_pages is not None and b.query_pages is None
        for j in range(SHAPE.n_qo_heads):
            lost += len(np.setdiff1d(a.query_pages[j], b.decisions.selected[0][SPARSE][j // g]))
    assert lost > 0


def test_quest_selects_the_top_pages_of_the_current_query_and_attends_only_them() -> None:
    config = config_for("quest", knobs={"selection": "per-kv-head"})
    assert (config.knobs.group_pooling, config.knobs.page_summary) == ("max", "minmax")  # Quest's own
    steps = drive(config)
    moved = 0
    for step in steps:
        want = top_pages(oracle_scores(step, config), config.selected_pages)
        for h in range(SHAPE.n_kv_heads):
            np.testing.assert_array_equal(step.decisions.selected[0][SPARSE][h], want[h])
        torch.testing.assert_close(step.out.double(), attended_reference(step, config, want), atol=1e-5,
                                   rtol=1e-5)
        moved += int(step.decisions.fetched_tokens[0, SPARSE].sum())
    check_movement(steps, config)
    assert moved > 0  # the queries change: some pages are recalled


def test_quest_knobs_move_the_selection() -> None:
    base = drive(config_for("quest", knobs={"selection": "per-kv-head"}))
    per_head_mean = drive(config_for("quest", knobs={"selection": "per-kv-head", "group_pooling": "mean",
                                                     "page_summary": "box"}))
    assert any(not np.array_equal(a.decisions.selected[0][SPARSE][h], b.decisions.selected[0][SPARSE][h])
               for a, b in zip(base, per_head_mean, strict=True) for h in range(SHAPE.n_kv_heads))


def test_replaced_pages_counts_only_held_slots_overwritten() -> None:
    """Hand-checked: resident [5, -, 7] with scores 5: 1.0, 7: 0.2. Selecting [9, 5]: the miss 9 takes the
    empty slot (nothing replaced). Selecting [9, 8, 5]: 9 takes the empty slot, 8 replaces 7 (the lowest
    unselected), so one page is replaced."""
    resident = np.array([[[5, -1, 7]]])
    scores = np.array([[[1.0, -np.inf, 0.2]]])
    one = plan_reuse(np.array([[[9, 5]]]), resident, scores)
    assert one.n_missed[0, 0] == 1 and replaced_pages(one, resident)[0, 0] == 0
    two = plan_reuse(np.array([[[9, 8, 5]]]), resident, scores)
    assert two.n_missed[0, 0] == 2 and replaced_pages(two, resident)[0, 0] == 1


def test_selection_defaults_are_per_method_and_settable() -> None:
    assert RuntimeConfig(method="freekv").knobs.group_pooling == "softmax_mean"
    ark = RuntimeConfig(method="arkvale").knobs
    assert (ark.group_pooling, ark.page_summary) == ("mean", "box")
    quest = RuntimeConfig(method="quest", knobs={"group_pooling": "softmax_mean"})
    assert quest.knobs.group_pooling == "softmax_mean"
    assert RuntimeConfig(method="quest").to_dict()["knobs"]["group_pooling"] == "max"


@pytest.mark.parametrize(("method", "extra", "message"), [
    ("quest", {"top_pages": 2}, r"'top_pages' is not a knob of quest; valid knobs: selection, group_pooling"),
    ("quest", {"selection": "per-head"}, "quest knob selection must be one of per-query-head, per-kv-head"),
    ("quest", {"staging_pages": -1}, "quest knob staging_pages must be an integer >= 0, got -1"),
    ("quest", {"offload": True}, "offload is a simulator knob .* of quest, not read by the runtime"),
    ("arkvale", {"top_pages": 6}, r"arkvale knob top_pages must be an integer in 1..5"),
    ("arkvale", {"selection_groups": "layer"}, "arkvale knob selection_groups must be an integer >= 1"),
])
def test_bad_knobs_are_refused_with_the_key_named(method: str, extra: dict, message: str) -> None:
    with pytest.raises(RuntimeConfigError, match=message):
        make_policy(config_for(method, knobs=extra))


def test_arkvale_selection_groups_must_divide_the_kv_heads() -> None:
    policy = make_policy(config_for("arkvale", knobs={"selection_groups": 3}))
    with pytest.raises(RuntimeConfigError, match="arkvale knob selection_groups must divide the model's"):
        policy.new_state(SHAPE, 1, torch.device("cpu"), torch.float32, OpTimer(torch.device("cpu")))
