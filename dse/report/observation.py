"""Section 3: does the reference's observation (adjacent queries are similar) hold on this model?

A heatmap of the measured mean cosine similarity of adjacent decode-step queries per (layer, KV head),
and the measured correction rate per layer for each tau the study tried.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import Block, FigureBlock, NoteBlock, Section
from dse.report.provenance import Provenance
from dse.report.summary import layer_correction_rates, similarity_matrix

__all__ = ["observation_section", "reference_run"]


def reference_run(data: ReportData) -> Run | None:
    """The run whose trace stands for the model: untuned FreeKV if traced, else the first traced trial."""
    candidates = [data.untuned] if data.untuned is not None else []
    candidates += list(data.trials)
    for run in candidates:
        if run is not None and similarity_matrix(run.trace_summary) is not None:
            return run
    return None


def observation_section(data: ReportData) -> Section:
    blocks: list[Block] = []
    run = reference_run(data)
    if run is None:
        blocks.append(
            NoteBlock(
                "No trace summary in this study holds query similarities, so the observation "
                "cannot be checked.",
                kind="warning",
            )
        )
    else:
        blocks.append(_similarity_heatmap(data, run))
    blocks.append(_correction_by_layer(data))
    return Section(
        anchor="observation",
        title="The observation on this model",
        question="Are the queries of adjacent decode steps as similar on this model as the reference found "
        "(mean cosine above 0.84 for every head, above 0.9 for most)? How often does FreeKV correct?",
        blocks=tuple(blocks),
    )


def _similarity_heatmap(data: ReportData, run: Run) -> FigureBlock:
    sim = similarity_matrix(run.trace_summary)
    assert sim is not None
    n_layers, n_heads = sim.shape
    finite = sim[np.isfinite(sim)]
    share_09 = float((finite > 0.9).mean()) if finite.size else float("nan")
    share_084 = float((finite > 0.84).mean()) if finite.size else float("nan")
    z = [[None if not np.isfinite(v) else float(v) for v in row] for row in sim]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"KV head {h}" for h in range(n_heads)],
            y=list(range(n_layers)),
            colorscale="RdYlGn",
            zmin=0.5,
            zmax=1.0,
            colorbar={"title": {"text": "cosine"}},
            hovertemplate="layer %{y}, %{x}<br>mean similarity %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis_title="KV head (group-mean over its query heads)",
        yaxis_title="layer",
        yaxis={"autorange": "reversed"},
    )
    return FigureBlock(
        title=f"Mean adjacent-query similarity per (layer, KV head), {data.measured_model}",
        figure=fig,
        caption=f"From the trace of {run_label(run)} ({describe_config(run.config)}). {share_084:.0%} "
        "of (layer, head) cells are "
        f"above 0.84 and {share_09:.0%} above 0.9 (the reference: all above 0.84, most above 0.9 on "
        "7B-14B models). Blank rows are dense layers, where no similarity is computed.",
        provenance=Provenance(measured=(f"post-RoPE query cosine similarity of {data.measured_model}",)),
        height_px=max(360, 120 + 16 * n_layers),
    )


def _correction_by_layer(data: ReportData) -> Block:
    by_tau: dict[float, list[tuple[Run, list[float | None]]]] = {}
    for t in data.trials:
        rates = layer_correction_rates(t.trace_summary)
        if t.config.get("tau") is not None and rates is not None:
            by_tau.setdefault(float(t.config["tau"]), []).append((t, rates))
    if not by_tau:
        return NoteBlock(
            "No trial records per-layer correction rates, so they are not shown.", kind="warning"
        )
    fig = go.Figure()
    for tau in sorted(by_tau):
        runs = by_tau[tau]
        n_layers = len(runs[0][1])
        mean = []
        for layer in range(n_layers):
            vals = [r[layer] for _, r in runs if layer < len(r) and r[layer] is not None]
            mean.append(float(np.mean(vals)) if vals else None)
        fig.add_trace(
            go.Scatter(
                x=list(range(n_layers)),
                y=mean,
                mode="lines+markers",
                name=f"tau={tau:g}",
                hovertemplate=f"tau={tau:g}, layer %{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_layout(
        xaxis_title="layer", yaxis_title="share of (step, KV head) corrected", yaxis={"range": [0, 1.02]}
    )
    n = sum(len(v) for v in by_tau.values())
    return FigureBlock(
        title="Correction rate per layer",
        figure=fig,
        caption=f"Mean over the {n} traced trials at each tau. Gaps are dense layers (never corrected).",
        provenance=Provenance(measured=(f"correction flags of {data.measured_model} (traces)",)),
    )
