"""`dse report`: self-contained plotly HTML reports of a study (see docs/report.md)."""

from __future__ import annotations

from dse.report.build import ReportSummary, build_report

__all__ = ["ReportSummary", "build_report"]
