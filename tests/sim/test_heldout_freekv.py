"""benchmarks/heldout_freekv.py: the held-out comparison with the FreeKV paper's "up to 13x" runs and
reports a finite maximum with the peer and setting it came from."""

from __future__ import annotations

import math
import re

from benchmark_script import load_benchmark


def _module():
    return load_benchmark("heldout_freekv")


def test_rows_are_peer_over_freekv() -> None:
    mod = _module()
    rows = mod.table(("llama-3.1-8b",), (1,), "ideal")
    assert len(rows) == len(mod.SCENARIOS)
    for r in rows:
        for peer in mod.PEERS:
            assert math.isclose(r[f"{peer}_x"], r[f"{peer}_ms"] / r["freekv_ms"])


def test_quick_run_prints_the_maximum_beside_the_published_figure(capsys) -> None:
    assert _module().main(["--quick", "--mode", "as-published"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"max speedup of FreeKV over a retrieval peer: ([0-9.]+)x \((\w+),", out)
    assert found and float(found.group(1)) > 1.0 and found.group(2) in _module().PEERS
    assert "published: up to 13x" in out
