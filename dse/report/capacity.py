"""Section 4: capacity planning — how many sequences fit, how fast, and which configuration to run.

Per hardware profile: GPU memory needed vs batch at several context lengths and the largest batch
that fits; per-token latency and tokens/s vs batch and vs context length (simulator runs over a small
grid, replaying the recommended trial's measured demand). Across profiles: the recommended
configuration (dse/report/recommend.py: the highest tokens/s within the latency SLO and the accuracy
floor, at the largest batch that meets the SLO), how sure each recommendation is (dse/report/sureness.py:
validation band, pricing-mode spread, hardware sensitivity), and every simulated method side by side.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.report.colors import add_slo_hline
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.grid import CapacityGrid, capacity_grid
from dse.report.methods import methods_blocks
from dse.report.page import Block, FigureBlock, NoteBlock, Section, TableBlock
from dse.report.provenance import Provenance, mapped_sources, pricing_sources
from dse.report.recommend import RULE, RULE_NO_SLO, Recommendation, describe_entry, floor_metric, recommend
from dse.report.simulate import Replays, sim_method
from dse.report.sureness import sureness_table

__all__ = ["capacity_section"]

_GIB = 2**30
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def capacity_section(data: ReportData, replays: Replays, seed: int = 0) -> Section:
    blocks: list[Block] = []
    grids: dict[str, CapacityGrid] = {}
    for profile in data.profiles:
        replay = replays.get(profile)
        if replay is None:
            blocks.append(
                NoteBlock(
                    f"No trial on {profile} has a trace or measured rates to replay, so no "
                    "capacity curves are drawn for it.",
                    kind="warning",
                )
            )
            continue
        grid = capacity_grid(data, profile, *replay, seed)
        grids[profile] = grid
        blocks.extend(
            [_memory_figure(grid), _batch_figure(grid, data.slo_s), _context_figure(grid, data.slo_s)]
        )
    recs = [recommend(data, profile) for profile in data.profiles]
    sure = sureness_table(data, recs, replays, seed)
    blocks[0:0] = [_recommendation_table(data, grids, recs), *([sure] if sure is not None else [])]
    blocks.extend(methods_blocks(data, replays, seed))
    return Section(
        anchor="capacity",
        title="Capacity planning",
        question="How much memory does each profile need, how many sequences fit, how fast does it decode "
        "as batch and context grow, and which configuration should run there?",
        blocks=tuple(blocks),
    )


def _provenance(grid: CapacityGrid, what: str) -> Provenance:
    return Provenance(
        simulated=(f"{what} on {grid.profile}",),
        measured=(f"demand (corrections, cache hits) of {run_label(grid.run)}",),
        mapped_from=(grid.mapped_from,) if grid.mapped_from else (),
        synthetic=(grid.synthetic,) if grid.synthetic else (),
        priced=grid.priced,
    )


def _memory_figure(grid: CapacityGrid) -> FigureBlock:
    fig = go.Figure()
    for i, context in enumerate(grid.contexts):
        color = _COLORS[i % len(_COLORS)]
        for method, dash in _methods(grid, ("solid", "dot")):
            pts = grid.memory[(method, context)]
            fig.add_trace(
                go.Scatter(
                    x=[b for b, _ in pts],
                    y=[m["gpu_bytes"] / _GIB for _, m in pts],
                    mode="lines+markers",
                    name=f"{method}, {context} tokens",
                    line={"color": color, "dash": dash},
                    hovertemplate=f"{method}, context {context}<br>batch %{{x}}: %{{y:.1f}} "
                    "GiB<extra></extra>",
                )
            )
    capacity_gib = grid.gpu_memory_bytes / _GIB
    fig.add_trace(  # a trace, not add_hline: hline annotations misplace on log axes
        go.Scatter(
            x=[grid.batches[0], grid.batches[-1]],
            y=[capacity_gib, capacity_gib],
            mode="lines",
            name=f"GPU memory {capacity_gib:.0f} GiB",
            line={"color": "#000", "width": 3},
            hovertemplate=f"GPU memory {capacity_gib:.1f} GiB<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis={"title": "batch (sequences)", "type": "log", "dtick": 0.30102999566},
        yaxis={"title": "GPU memory needed (GiB)", "type": "log"},
        legend={"font": {"size": 10}},
    )
    fits = "; ".join(
        f"prompt {c}: " + " vs ".join(f"{grid.max_batch[(m, c)]} ({m})" for m, _ in _methods(grid, ("", "")))
        for c in grid.contexts
    )
    return FigureBlock(
        title=f"GPU memory needed vs batch on {grid.profile}",
        figure=fig,
        caption=f"GiB of GPU memory (weights, KV state and working buffers) of {grid.model} for "
        f"{describe_config(grid.run.config)} (solid) and dense attention (dotted), at the final context: "
        f"each prompt length plus the study's {grid.output_tokens} output tokens. The black line is the "
        f"GPU's memory. Largest batch that fits — {fits}.",
        provenance=_provenance(grid, "memory fit"),
        height_px=480,
    )


def _methods(grid: CapacityGrid, styles: tuple[str, str]) -> list[tuple[str, str]]:
    """(method, style) of the grid's configuration and of dense attention, once when they are the same."""
    pairs = [(grid.method, styles[0]), ("dense", styles[1])]
    return pairs[:1] if grid.method == "dense" else pairs


def _latency_ms(res: dict, stat: str = "mean") -> float | None:
    """Per-token latency (`stat`) in ms, None (a gap in the curve) where the batch is out of memory."""
    return None if res.get("oom") else res["per_token_latency_s"][stat] * 1e3


def _two_panel(grid: CapacityGrid, axis: str, slo_s: float | None) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per-token latency (ms)", "throughput (tokens/s)"))
    series = grid.by_batch if axis == "batch" else grid.by_context
    for i, (method, _) in enumerate(_methods(grid, ("", ""))):
        pts = series[method]
        xs = [x for x, _ in pts]
        text = ["fits" if r["memory"]["fits"] else "does NOT fit GPU memory" for _, r in pts]
        symbols = ["circle" if r["memory"]["fits"] else "x" for _, r in pts]
        common: dict[str, Any] = {
            "mode": "lines+markers",
            "legendgroup": method,
            "text": text,
            "marker": {"symbol": symbols, "size": 9},
        }
        for stat, dash in (("mean", "solid"), ("p99", "dash")):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[_latency_ms(r, stat) for _, r in pts],
                    name=f"{method} {stat}",
                    line={"color": _COLORS[i], "dash": dash},
                    hovertemplate=f"{method} {stat}: %{{x}} → %{{y:.3f}} ms/token, %{{text}}<extra></extra>",
                    **common,
                ),
                row=1,
                col=1,
            )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[None if r.get("oom") else r["throughput_tokens_per_s"] for _, r in pts],
                name=method,
                showlegend=False,
                line={"color": _COLORS[i]},
                hovertemplate=f"{method}: %{{x}} → %{{y:.0f}} tokens/s, %{{text}}<extra></extra>",
                **common,
            ),
            row=1,
            col=2,
        )
    if slo_s is not None:
        add_slo_hline(fig, slo_s * 1e3, label=f"SLO {slo_s * 1e3:g} ms", row=1, col=1)
    title = "batch (sequences)" if axis == "batch" else "context length (prompt tokens)"
    fig.update_xaxes(title_text=title, type="log")
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title_text="ms per token", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=1, col=2)
    return fig


def _slo_text(slo_s: float | None) -> str:
    return "" if slo_s is None else f" The red dashed line is the SLO ({slo_s * 1e3:g} ms per token)."


def _batch_figure(grid: CapacityGrid, slo_s: float | None) -> FigureBlock:
    return FigureBlock(
        title=f"Latency and throughput vs batch on {grid.profile}",
        figure=_two_panel(grid, "batch", slo_s),
        caption=f"{grid.model}, prompt {grid.input_tokens} tokens and {grid.output_tokens} output tokens: "
        f"memory at the final context, per-token latency (ms; solid: mean, dashed: p99) and throughput "
        f"(tokens/s) over the whole decode ({grid.sampled}); {describe_config(grid.run.config)} "
        f"({run_label(grid.run)}) vs dense attention. Where the batch does not fit memory there is no "
        "latency (out of memory): the curve stops." + _slo_text(slo_s),
        provenance=_provenance(grid, "per-token latency and throughput"),
    )


def _context_figure(grid: CapacityGrid, slo_s: float | None) -> FigureBlock:
    return FigureBlock(
        title=f"Latency and throughput vs context length on {grid.profile}",
        figure=_two_panel(grid, "context", slo_s),
        caption=f"{grid.model}, batch {grid.batch_size}, each prompt length followed by {grid.output_tokens} "
        f"output tokens ({grid.sampled}); per-token latency in ms (solid: mean, dashed: p99), throughput in "
        f"tokens/s; {describe_config(grid.run.config)} vs dense attention. Where it does not fit memory "
        "at the final context there is no latency (out of memory): the curve stops." + _slo_text(slo_s),
        provenance=_provenance(grid, "per-token latency and throughput"),
    )


def _recommendation_table(data: ReportData, grids: dict[str, CapacityGrid], recs: list[Recommendation]
                          ) -> Block:
    ratio = (data.results.config.get("constraints") or {}).get("min_accuracy_ratio")
    floor = "no floor" if ratio is None else f"{float(ratio):g} x dense's {floor_metric(data)}"
    slo = "no SLO given" if data.slo_s is None else f"{data.slo_s * 1e3:g} ms/token"
    limits = f"{slo}; floor: {floor}"
    rows = []
    runs: list[Run] = []
    for rec in recs:
        if rec.run is None or rec.chosen is None:
            rows.append((rec.profile, limits, rec.why_none, *("-",) * 7, rec.losers()))
            continue
        runs.append(rec.run)
        rows.append(_recommendation_row(data, limits, rec, grids.get(rec.profile)))
    sampled = next((g.sampled for g in grids.values() if g.sampled), "")
    return TableBlock(
        title="Recommended configuration per profile: the fastest that keeps accuracy",
        header=(
            "profile",
            "latency SLO; accuracy floor",
            "configuration (or why none)",
            f"{data.accuracy_metric} (measured, 95% interval)",
            "accuracy floor verdict (how decided)",
            "batch: largest under the SLO (simulated)",
            "tokens/s there (simulated)",
            "latency mean / p99 there (ms/token, simulated)",
            "largest batch that fits memory",
            "runner-up",
            "why the others lost",
        ),
        rows=tuple(rows),
        caption=_recommendation_caption(data, recs, sampled),
        provenance=Provenance(
            measured=(f"{data.accuracy_metric} of {data.measured_model}",),
            simulated=(f"latency, throughput and memory of {data.model} on each profile",),
            mapped_from=mapped_sources(r.sim[p] for r in runs for p in data.profiles if p in r.sim),
            priced=pricing_sources(r.sim[p] for r in runs for p in data.profiles if p in r.sim),
        ),
    )


def _recommendation_row(
    data: ReportData, limits: str, rec: Recommendation, grid: CapacityGrid | None
) -> tuple[str, ...]:
    """The table row of a profile with a recommendation."""
    chosen = rec.chosen
    assert chosen is not None and chosen.point.result is not None
    run, res = chosen.run, chosen.point.result
    fits = res.get("memory", {}).get("max_batch", "-")  # at the final context (prompt + output)
    runner = rec.runner_up
    runner_text = "none: no other run qualifies" if runner is None else (
        f"{describe_entry(runner)}; {data.accuracy_metric} {_accuracy_cell(data, runner.run)}; "
        f"floor {runner.floor.text()}"
    )
    return (
        rec.profile,
        limits,
        f"{run_label(run)}: {describe_config(run.config)}",
        _accuracy_cell(data, run),
        chosen.floor.text(),
        f"{chosen.point.batch} ({chosen.point.source})" + _grid_note(data, run, grid),
        f"{chosen.point.tokens_per_s:.0f}",
        _latency_cell(res["per_token_latency_s"]),
        str(fits),
        runner_text,
        rec.losers(),
    )


def _grid_note(data: ReportData, run: Run, grid: CapacityGrid | None) -> str:
    """Where the capacity grid below replays `run` (or its dense curve is `run`): its largest batch under
    the SLO over a wider range of batches, for information (the pick compares the stored batches)."""
    best = None
    if grid is not None and grid.run is run:
        best = grid.largest_under_slo(grid.method, data.slo_s)
    elif grid is not None and sim_method(run.config) == "dense":  # the grid's dense curve
        best = grid.largest_under_slo("dense", data.slo_s)
    if best is None or grid is None:
        return ""
    batch, res = best
    under = "fits memory" if data.slo_s is None else "meets the SLO"
    return (f"; on the capacity grid below (batches {grid.batches[0]}-{grid.batches[-1]}) the largest that "
            f"{under} is {batch}, {res['throughput_tokens_per_s']:.0f} tokens/s")


def _recommendation_caption(data: ReportData, recs: list[Recommendation], sampled: str) -> str:
    rule = (f"Rule: {RULE}." if data.slo_s is not None else
            f"Rule ({RULE_NO_SLO}; the study gave no latency SLO, so any batch that fits memory counts).")
    undecided = [f"{r.profile}: {r.n_undecided} ({r.undecided_names()})" for r in recs if r.n_undecided]
    return (
        rule + " Candidates: every run — the baselines (dense attention, untuned FreeKV, other methods' "
        "untuned baselines) and the trials — with a measured accuracy and a simulated result on the "
        "profile. The accuracy floor (the study's min_accuracy_ratio of dense attention's accuracy) is "
        "decided per run on paired per-prompt scores where the run and dense attention both stored them "
        "(paired bootstrap interval of d = mean(run) - ratio x mean(dense), McNemar's exact test for 0/1 "
        "scores, at least 3 / (1 - ratio) prompts before 'meets'; see dse/accuracy/floor.py), else on the "
        "stored point estimate (or the lower end of its 95% interval, constraints.bound: lower); the "
        "verdict cell says which. Dense attention is the floor's reference. Runs below the floor are "
        "excluded; undecided runs are excluded from the pick but listed, not dropped silently"
        + (" — undecided here: " + "; ".join(undecided) if undecided else "")
        + ". Each run is taken at the largest batch, of those simulated for it at the study's prompt "
        "length (the stored grid of the study's batch sizes; the study's batch alone where no grid was "
        "stored, as the cell says), that fits GPU memory at the final context (prompt + output"
        + (f"; {sampled}" if sampled else "")
        + ") and whose mean per-token latency meets the SLO; the pick has the highest simulated tokens/s "
        "there (ties: the more accurate, then the lower latency). The runner-up is the next by the same "
        "rule; the last column counts why the other runs lost: below the floor, undecided, over the SLO or "
        "out of memory at every simulated batch, or slower. The curves below replay the recommended run "
        "against dense attention; where there is none, or it is dense attention itself, the untuned "
        "FreeKV baseline (else the most accurate trial), named in each caption."
    )


def _latency_cell(lat: dict) -> str:
    """'mean / p99' in ms; where rare stalls put p99 below the mean, the longest step too."""
    text = f"{lat['mean'] * 1e3:.3f} / {lat['p99'] * 1e3:.3f}"
    if lat["p99"] < lat["mean"] and lat.get("max") is not None:
        text += f" (rare stalls under 1% of steps, up to {lat['max'] * 1e3:.1f} ms, lift the mean above p99)"
    return text


def _accuracy_cell(data: ReportData, run: Run) -> str:
    """'0.812 [0.700, 0.910]': the measured value and its 95% interval where one was stored."""
    value = f"{data.accuracy(run):.3f}"
    exact = (run.trace_summary or {}).get("accuracy_exact") or {}
    if data.accuracy_metric in exact:
        return f"{value} ({exact[data.accuracy_metric]})"
    ci = (getattr(run, "accuracy_ci", {}) or {}).get(data.accuracy_metric) or {}
    if ci.get("low") is not None and ci.get("high") is not None:
        return f"{value} [{float(ci['low']):.3f}, {float(ci['high']):.3f}]"
    return value
