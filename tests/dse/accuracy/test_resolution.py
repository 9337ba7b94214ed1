"""Resolved at 95% or not, and the paired samples that would resolve a difference: hand-computed cases
(Connor 1987 for McNemar, the paired t size for continuous scores), and `dse compare` printing them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dse.accuracy.paired import compare_metric
from dse.accuracy.resolution import detectable_drop, mcnemar_pairs_needed, paired_means_needed, resolve
from dse.cli import cli


def _ids(values: list[float]) -> dict[str, float]:
    return {f"p{i}": float(v) for i, v in enumerate(values)}


def test_connor_sample_size_by_hand() -> None:
    # psi = 0.2, delta = -0.1: (1.959964 x 0.447214 + 0.841621 x sqrt(0.19))^2 / 0.01 = 154.6 -> 155
    assert mcnemar_pairs_needed(0.05, 0.15) == 155
    # psi = 0.125, delta = -0.125: (0.692952 + 0.841621 x 0.330719)^2 / 0.015625 = 60.38 -> 61
    assert mcnemar_pairs_needed(0.0, 0.125) == 61
    assert mcnemar_pairs_needed(0.1, 0.0) == mcnemar_pairs_needed(0.0, 0.1)  # symmetric in direction
    assert mcnemar_pairs_needed(0.1, 0.1) is None  # no difference: nothing to size for
    assert mcnemar_pairs_needed(0.0, 0.0) is None


def test_paired_t_sample_size_by_hand() -> None:
    # mean -0.15, sd sqrt(0.05 / 3) = 0.129099: (2.801585 x 0.129099 / 0.15)^2 = 5.81 -> 6
    assert paired_means_needed(np.array([-0.1, -0.2, -0.3, 0.0])) == 6
    assert paired_means_needed(np.array([0.2, -0.2])) is None  # mean 0
    assert paired_means_needed(np.array([-0.1, -0.1, -0.1])) == 2  # no spread: any 2 pairs resolve it


def test_detectable_drop_is_six_losses_of_n() -> None:
    # McNemar's exact p with k losses and no wins is 2 x 0.5^k: 0.0625 at 5, 0.03125 at 6
    assert detectable_drop(16) == pytest.approx(6 / 16)
    assert detectable_drop(32) == pytest.approx(6 / 32)
    assert detectable_drop(6) == 1.0
    assert math.isinf(detectable_drop(5))


def test_resolve_binary_scores() -> None:
    dense = _ids([1] * 16)
    # 6 losses, 0 wins: p = 2 / 64 = 0.03125 < 0.05
    r = resolve(_ids([0] * 6 + [1] * 10), dense)
    assert (r.test, r.resolved, r.needed, r.n) == ("mcnemar exact", True, None, 16)
    assert r.p == pytest.approx(0.03125)
    # 3 losses of 10: p = 0.25; Connor with p10 = 0, p01 = 0.3: 1.459194^2 / 0.09 = 23.66 -> 24
    r = resolve(_ids([0] * 3 + [1] * 7), _ids([1] * 10))
    assert (r.resolved, r.needed) == (False, 24)
    assert r.p == pytest.approx(0.25) and r.short() == "no: ~24 pairs"
    r = resolve(_ids([1] * 8), _ids([1] * 8))  # no discordant prompt
    assert (r.resolved, r.needed, r.p) == (False, None, 1.0) and "no discordant" in r.reason
    assert resolve(_ids([1]), _ids([0])).test == "none"  # one pair: nothing to test


def test_resolve_continuous_scores_uses_the_interval() -> None:
    a, b = _ids([0.1, 0.2, 0.3, 0.4]), _ids([0.3, 0.5, 0.55, 0.6])
    assert resolve(a, b, (-0.3, -0.1)).resolved
    r = resolve(a, b, (-0.3, 0.05))
    assert (r.test, r.resolved, r.p) == ("paired bootstrap", False, None)
    # differences -0.2, -0.3, -0.25, -0.2: mean -0.2375, sd 0.047871: (2.801585 x 0.20156)^2 = 0.32 -> 2
    assert r.needed == 2
    noisy = resolve(_ids([0.0, 0.5, 0.0, 0.6]), _ids([0.3, 0.2, 0.4, 0.6]), (-0.3, 0.2))
    # differences -0.3, +0.3, -0.4, 0: mean -0.1, sd 0.316228: (2.801585 x 3.16228)^2 = 78.5 -> 79
    assert noisy.needed == 79
    assert resolve(a, b).resolved  # interval computed here: every difference is negative


def test_compare_metric_carries_the_resolution() -> None:
    a = [{"id": f"x{i}", "score": s, "answer": ""} for i, s in enumerate([0, 0, 0, 1, 1, 1, 1, 1])]
    b = [{"id": f"x{i}", "score": 1.0, "answer": ""} for i in range(8)]
    c = compare_metric("m", a, b)
    assert c.resolution is not None and c.resolution.p == pytest.approx(c.mcnemar_p)
    assert not c.resolution.resolved and c.resolution.needed == mcnemar_pairs_needed(0.0, 3 / 8)
    d = c.to_dict()
    assert (d["resolved"], d["pairs_needed"]) == (False, c.resolution.needed)


def _run(path: Path, scores: list[float]) -> Path:
    path.mkdir(parents=True)
    samples = [{"id": f"niah_single/1024/seed0/{i}", "score": s, "answer": str(i)}
               for i, s in enumerate(scores)]
    path.joinpath("summary.json").write_text(json.dumps(
        {"accuracy": {"niah_single_score": sum(scores) / len(scores)},
         "accuracy_samples": {"niah_single_score": samples}}))
    return path


def test_compare_cli_says_resolved_and_pairs_needed(tmp_path: Path) -> None:
    dense = _run(tmp_path / "dense", [1] * 16)
    lost = _run(tmp_path / "lost", [0] * 7 + [1] * 9)
    close = _run(tmp_path / "close", [0] * 2 + [1] * 14)
    same = _run(tmp_path / "same", [1] * 16)
    text = CliRunner().invoke(cli, ["compare", str(lost), str(dense)]).output
    assert "resolved at 95%: yes (McNemar exact test)" in text
    text = CliRunner().invoke(cli, ["compare", str(close), str(dense)]).output
    n = mcnemar_pairs_needed(0.0, 2 / 16)
    assert f"resolved at 95%: no (McNemar exact test); about {n:.0f} paired prompts would resolve" in text
    text = CliRunner().invoke(cli, ["compare", str(same), str(dense)]).output
    assert "no difference observed" in text and "a drop of 38% or more" in text
    out = tmp_path / "c.json"
    CliRunner().invoke(cli, ["compare", str(close), str(dense), "--json", str(out)])
    assert json.loads(out.read_text())["metrics"]["niah_single_score"]["pairs_needed"] == n
