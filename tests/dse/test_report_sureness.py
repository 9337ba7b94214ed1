"""The report's 'how sure' table: per profile with a recommendation, the method's validation band, the
capacity search priced both ways and at the ends of the hardware ranges."""

from __future__ import annotations

import dataclasses
import re

from dse.report.data import ReportData, run_label
from dse.report.recommend import recommend
from dse.report.simulate import plan_replays
from dse.report.sureness import sureness_table
from sim.validation_bands import band


def _tokens(cell: str) -> float:
    match = re.search(r"([0-9.]+) tokens/s at batch (\d+)", cell)
    assert match, cell
    return float(match.group(1))


def test_each_recommendation_carries_its_band_pricing_and_hardware_ends(floor_data: ReportData) -> None:
    data = floor_data
    recs = [recommend(data, profile) for profile in data.profiles]
    table = sureness_table(data, recs, plan_replays(data))
    assert table is not None
    col = {h: i for i, h in enumerate(table.header)}
    assert len(table.rows) == len(data.profiles)
    for rec, row in zip(recs, table.rows, strict=True):
        assert row[0] == rec.profile
        assert row[1].startswith(f"{run_label(rec.run)}: ")
        assert row[2] == band("freekv", "as-published").label()
        base = row[col["capacity search: largest batch under the SLO (every batch, profile's own numbers)"]]
        # the bisection over every batch finds at least the largest stored batch under the SLO
        batch = int(re.search(r"at batch (\d+)", base).group(1))
        assert batch >= rec.chosen.point.batch, (base, rec.chosen.point.batch)
        assert row[col["priced the other way"]].startswith("ideal: ")
        hbm = row[col["HBM bandwidth efficiency at its range ends"]]
        low, high = hbm.split("; x")
        assert low.startswith("x0.8: ") and high.startswith("1.2: ")
        # more HBM bandwidth never serves fewer tokens/s
        assert _tokens(high) >= _tokens(low), hbm


def test_without_a_latency_slo_only_the_band_is_shown(floor_data: ReportData) -> None:
    data = dataclasses.replace(floor_data, slo_s=None)
    recs = [recommend(data, profile) for profile in data.profiles]
    table = sureness_table(data, recs, plan_replays(data))
    assert table is not None
    for row in table.rows:
        assert row[2].endswith("[as-published pricing]")
        assert all(cell == "- (no latency SLO)" for cell in row[3:])
