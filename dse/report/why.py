"""Section 2: why a configuration is fast or slow.

Latency by operation on each profile (from the trials' simulated results), then the stream timeline
of a typical and of a corrected decode step of the recommended configuration (simulator re-run).
"""

from __future__ import annotations

from dse.report.breakdown import breakdown_figure
from dse.report.data import ReportData
from dse.report.page import Block, Section
from dse.report.simulate import Replays
from dse.report.timeline import timeline_blocks

__all__ = ["why_section"]


def why_section(data: ReportData, replays: Replays, seed: int = 0) -> Section:
    blocks: list[Block] = [breakdown_figure(data, p) for p in data.profiles]
    blocks.extend(timeline_blocks(data, replays, seed))
    return Section(
        anchor="why",
        title="Why a configuration is fast or slow",
        question="Where does each decode step spend its time, and what changes when FreeKV has to correct?",
        blocks=tuple(blocks),
    )
