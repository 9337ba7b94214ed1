"""ArkVale: digest-estimated importance every step, a GPU cache of the budget, recall and eviction.

Checked against an independent float64 computation (test_quest helpers): the selection is the top
`top_pages` pages under box digests with the raw scores averaged over every query head of the layer
(ArkVale's n_groups = 1), the selected pages are made resident, the pages evicted are the lowest-scoring
unselected ones, and attention reads the whole cache (sink + every resident page + window), not only the
selection.
"""

from __future__ import annotations

import numpy as np
import torch
from test_policy_conformance import SHAPE, config_for
from test_quest import SPARSE, attended_reference, check_movement, drive, oracle_scores, top_pages


def test_arkvale_recalls_the_important_pages_evicts_the_least_and_attends_the_whole_cache() -> None:
    config = config_for("arkvale")
    # ArkVale's own defaults
    assert (config.knobs.group_pooling, config.knobs.page_summary) == ("mean", "box")
    n_top = config.selected_pages // 2
    steps = drive(config)
    evictions = 0
    for step in steps:
        scores = oracle_scores(step, config, heads_per_selection=SHAPE.n_kv_heads)
        want = top_pages(scores, n_top)
        resident = [row[row >= 0] for row in step.resident_after]
        for h in range(SHAPE.n_kv_heads):
            np.testing.assert_array_equal(step.decisions.selected[0][SPARSE][h], want[h])
            np.testing.assert_array_equal(want[h], want[0])  # one selection per layer
            before = step.resident_before[h]
            evicted = np.setdiff1d(before[before >= 0], resident[h])
            kept_unselected = np.setdiff1d(resident[h], want[h])
            if len(evicted) and len(kept_unselected):  # the least important went
                assert scores[h, evicted].max() <= scores[h, kept_unselected].min()
            evictions += len(evicted)
        assert all(len(r) == config.selected_pages for r in resident)  # the cache stays full
        torch.testing.assert_close(step.out.double(), attended_reference(step, config, resident), atol=1e-5,
                                   rtol=1e-5)
    check_movement(steps, config)
    assert evictions > 0


def test_arkvale_per_kv_head_selection_and_top_pages_knobs() -> None:
    """selection_groups = Hkv: each KV head selects on its own (its group's mean); top_pages = every slot:
    the cache holds exactly the selection (Quest-like)."""
    config = config_for("arkvale", knobs={"selection_groups": SHAPE.n_kv_heads})
    steps = drive(config)
    differ = False
    for step in steps:
        want = top_pages(oracle_scores(step, config), config.selected_pages // 2)
        for h in range(SHAPE.n_kv_heads):
            np.testing.assert_array_equal(step.decisions.selected[0][SPARSE][h], want[h])
        differ |= not np.array_equal(want[0], want[1])
    assert differ
    full = config_for("arkvale", knobs={"top_pages": config.selected_pages})
    for step in drive(full):
        for h in range(SHAPE.n_kv_heads):
            resident = np.sort(step.resident_after[h])
            np.testing.assert_array_equal(step.decisions.selected[0][SPARSE][h], resident)
