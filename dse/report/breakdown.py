"""Section 2, part 1: why a configuration is fast or slow — simulated latency by operation.

For each profile, stacked bars of the critical-path seconds per token of each operation (the
simulator's `breakdown_s`) for the baselines, the recommended configuration and the Pareto front.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dse.report.colors import add_slo_vline, bar_marker
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import FigureBlock
from dse.report.pareto import pareto_front
from dse.report.provenance import Provenance, mapped_sources, pricing_sources
from dse.report.recommend import recommend

__all__ = ["breakdown_figure", "featured_runs"]

_MAX_FRONT = 5


def featured_runs(data: ReportData, profile: str) -> list[Run]:
    """Baselines, the recommendation and up to 5 Pareto-front trials on `profile`, without repeats."""
    runs: list[Run] = [r for r in data.baselines() if r.latency_s(profile) is not None]  # OOM: no latency
    rec = recommend(data, profile).run
    if rec is not None:
        runs.append(rec)
    scored = data.scored_runs(profile)
    front = pareto_front([(r.latency_s(profile), data.accuracy(r)) for r in scored])
    runs.extend(scored[i] for i in front[:_MAX_FRONT])
    unique: dict[str, Run] = {}
    for r in runs:
        unique.setdefault(run_label(r), r)
    return list(unique.values())


def breakdown_figure(data: ReportData, profile: str) -> FigureBlock:
    runs = featured_runs(data, profile)
    rec = recommend(data, profile).run
    names = [f"{run_label(r)}{' (recommended)' if rec is not None and r is rec else ''}" for r in runs]
    ops = list(dict.fromkeys(op for r in runs for op in r.sim[profile].get("breakdown_s", {})))
    fig = go.Figure()
    for op in ops:
        fig.add_trace(
            go.Bar(
                y=names,
                x=[r.sim[profile].get("breakdown_s", {}).get(op, 0.0) * 1e3 for r in runs],
                name=op,
                orientation="h",
                marker=bar_marker(op),
                customdata=[describe_config(r.config) for r in runs],
                hovertemplate=f"{op}: %{{x:.4f}} ms/token<br>%{{customdata}}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            y=names,
            x=[r.latency_s(profile) * 1e3 for r in runs],
            mode="markers",
            name="mean per-token latency",
            marker={"symbol": "line-ns-open", "size": 18, "color": "#000", "line": {"width": 2}},
            hovertemplate="total %{x:.4f} ms/token<extra></extra>",
        )
    )
    if data.slo_s is not None:
        add_slo_vline(fig, data.slo_s * 1e3)
    fig.update_layout(
        barmode="stack",
        xaxis={"title": f"ms per token on {profile} (critical path, simulated)", "rangemode": "tozero"},
        yaxis={"autorange": "reversed"},
        legend={"orientation": "h", "y": -0.25},
    )
    return FigureBlock(
        title=f"Latency breakdown by operation on {profile}",
        figure=fig,
        caption="Milliseconds per token each operation holds the critical path (work hidden behind other "
        "streams is not counted); hatched ('<op>.host'): the GPU waited for the host thread's work for that "
        "operation (Python and launch work of the software profile), in the operation's colour. The black "
        "tick is the mean per-token latency"
        + ("" if data.slo_s is None else f", the red dashed line the SLO ({data.slo_s * 1e3:g} ms)")
        + ". Colours are the same for an operation in every figure. Hover for each configuration.",
        provenance=Provenance(
            simulated=(f"critical-path time per operation on {profile}",),
            mapped_from=mapped_sources(r.sim[profile] for r in runs),
            priced=pricing_sources(r.sim[profile] for r in runs),
        ),
        height_px=max(320, 140 + 40 * len(runs)),
    )
