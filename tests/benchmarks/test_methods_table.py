"""benchmarks/methods_table.py without running the model: cached cells are read back only when their
settings match, the table pairs every cell with dense and says whether the difference is resolved."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import methods_table as mt


def _args(out: Path, *extra: str) -> object:
    return mt._parser().parse_args(["--out", str(out), *extra])


def _cell(args, method: str, budget: int | None, scores: list[float]) -> None:
    cell = mt._cell_dir(args, method, budget)
    cell.mkdir(parents=True)
    samples = [{"id": f"niah_single/512/seed0/{i}", "score": s, "answer": str(s)}
               for i, s in enumerate(scores)]
    summary = {"accuracy": {"niah_single_score": sum(scores) / len(scores)},
               "accuracy_ci": {"niah_single_score": {"low": 0.0, "high": 1.0, "n": len(scores)}},
               "accuracy_samples": {"niah_single_score": samples}}
    (cell / "summary.json").write_text(json.dumps(summary))
    (cell / "cell.json").write_text(json.dumps(mt._settings(args)))


def test_cells_pair_with_dense_and_stale_cells_are_left_out(tmp_path: Path, monkeypatch, capsys) -> None:
    args = _args(tmp_path)
    _cell(args, "dense", None, [1.0] * 16)
    _cell(args, "snapkv", 128, [0.0] * 14 + [1.0] * 2)
    _cell(args, "quest", 128, [0.0] * 3 + [1.0] * 13)
    _cell(args, "h2o", 256, [1.0] * 16)
    stale = mt._cell_dir(args, "tova", 128)
    _cell(args, "tova", 128, [1.0] * 16)
    (stale / "cell.json").write_text(json.dumps({**mt._settings(args), "samples": 8}))  # other settings
    assert mt._cached(stale, mt._settings(args)) is None
    assert mt._cached_cells(args) == [("dense", None), ("quest", 128), ("h2o", 256), ("snapkv", 128)]
    monkeypatch.setattr(sys, "argv", ["methods_table.py", "--out", str(tmp_path), "--table-only"])
    mt.main()
    text = (tmp_path / "table.md").read_text()
    assert "| dense | - | 1.000" in text and "tova" not in text
    rows = {r["method"]: r for r in json.loads((tmp_path / "table.json").read_text())["rows"]}
    # 14 losses, no wins: McNemar p = 2 / 2^14; resolved
    assert rows["snapkv"]["resolved"] and rows["snapkv"]["mcnemar_p"] == pytest.approx(2 / 2**14)
    # 3 losses: p = 0.25, unresolved; Connor with p01 = 3/16
    assert not rows["quest"]["resolved"] and rows["quest"]["pairs_needed"] == 40
    assert rows["h2o"]["pairs_needed"] is None and "| h2o | 256 |" in text
    assert "no difference seen" in text and "smallest drop McNemar's exact test can resolve is 38%" in text
