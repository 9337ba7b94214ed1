"""Dense attention's fidelity against dense attention is exact by definition: never measured."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from dse.objective import DENSE_FIDELITY, EXACT_LABEL, measure
from dse.study import study_from_dict

REPO = Path(__file__).resolve().parents[2]


def test_dense_fidelity_is_recorded_as_exact_without_a_model_run(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "studies" / "smoke.yaml").read_text())
    data["tasks"] = [{"name": "fidelity", "context_tokens": 512, "samples": 2}]
    data["objectives"] = [{"metric": "top1_agreement"}, {"latency": {"hardware": "a100-40g-pcie4"}}]
    data.pop("constraints", None)
    study = study_from_dict(data)
    t0 = time.perf_counter()
    m = measure(study, None, tmp_path)
    assert time.perf_counter() - t0 < 5  # no model loaded, nothing run
    assert m.accuracy == DENSE_FIDELITY and m.trace_dirs == {}
    assert {k: (v["low"], v["high"], v["method"]) for k, v in m.intervals.items()} == {
        k: (v, v, "exact") for k, v in DENSE_FIDELITY.items()
    }
    assert m.summary["accuracy_exact"] == dict.fromkeys(DENSE_FIDELITY, EXACT_LABEL)
    assert m.samples == {}  # exact by definition: no prompt was run, so there are no per-prompt results
    assert not any(tmp_path.iterdir())  # no trace written


def test_heartbeat_prints_stages_elapsed_time_and_the_end() -> None:
    from dse.heartbeat import Heartbeat, format_elapsed

    lines: list[str] = []
    with Heartbeat(lines.append, "dense attention", interval_s=0.05) as beat:
        beat.stage("measuring task passkey (1 of 1: 3 samples at 1024 tokens)")
        time.sleep(0.2)
    assert lines[0].startswith("  dense attention: measuring task passkey (1 of 1")
    assert any(line.startswith("  dense attention: still measuring task passkey") for line in lines[1:-1])
    assert lines[-1].startswith("  dense attention: done in ")
    assert format_elapsed(42.2) == "42 s" and format_elapsed(185) == "3 min 05 s"
    assert format_elapsed(3720) == "1 h 02 min"
