"""Section 1, methods compared: each method's measured accuracy against its own simulated latency.

Shown when the study's runs (trials and untuned baselines; dense attention aside) cover two or more
methods. One figure per hardware profile: each trial is a point coloured by its method, its marker
saying the method's kind (retrieval: the whole KV stays reachable on the host, circle; dropping:
evicted tokens are gone, triangle; the catalogue's kind, traces.catalogue); each method's best point (its most
accurate run on that profile, then the fastest) is ringed; each method's untuned baseline
(baselines.untuned, baselines.untuned_freekv) is a diamond of its colour; dense attention is a star.
Every point replays its own trace with the same-named simulator model (dse/objective.py): no method is
priced with another method's demand. A replay onto another model's shape (the study's target model) is
labelled by the provenance badge. A table gives, per method, its kind, trials, best point and untuned
baseline on every profile, and the untuned baseline's paired difference from dense attention on the same
prompts: its 95% interval, McNemar's p for 0/1 scores, resolved at 95% or the pairs that would resolve it
(dse/accuracy/resolution.py).
"""

from __future__ import annotations

import plotly.graph_objects as go

from dse.accuracy.resolution import paired_text
from dse.method_knobs import method_kind
from dse.report.colors import add_slo_vline
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import Block, FigureBlock, NoteBlock, TableBlock
from dse.report.provenance import Provenance, mapped_sources, pricing_sources
from dse.report.simulate import sim_method

__all__ = ["compared_methods", "best_run", "method_comparison_blocks", "KIND_SYMBOLS"]

_MS = 1e3
KIND_SYMBOLS = {"retrieval": "circle", "dropping": "triangle-up", "dense": "star", "multi-context": "diamond",
                "unknown": "square"}
_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")


def _method(run: Run) -> str:
    return str(run.config.get("method", "?"))


def compared_methods(data: ReportData) -> list[str]:
    """The runtime methods of the trials and untuned baselines (not dense), in first-seen order."""
    runs = [*data.trials, *(b for b in data.baselines() if b.name != "dense")]
    return list(dict.fromkeys(m for m in map(_method, runs) if method_kind(m) != "dense"))


def best_run(data: ReportData, runs: list[Run], profile: str) -> Run | None:
    """The most accurate of `runs` with a latency on `profile`, ties broken by the lower latency."""
    scored = [r for r in runs if r.latency_s(profile) is not None and data.accuracy(r) is not None]
    if not scored:
        return None
    return min(scored, key=lambda r: (-(data.accuracy(r) or 0.0), r.latency_s(profile) or 0.0))


def _untuned(data: ReportData, method: str) -> Run | None:
    return next((b for b in data.baselines() if b.name != "dense" and _method(b) == method), None)


def method_comparison_blocks(data: ReportData) -> list[Block]:
    """A figure per profile and one table; nothing when the study compares fewer than two methods."""
    methods = compared_methods(data)
    if len(methods) < 2:
        return []
    colors = {m: _COLORS[i % len(_COLORS)] for i, m in enumerate(methods)}
    blocks: list[Block] = [_figure(data, p, methods, colors) for p in data.profiles]
    blocks.append(_table(data, methods))
    traceless = sorted({_method(r) for r in data.runs() if _method(r) in methods and any(
        str(res.get("demand", "")).startswith("none") for res in r.sim.values())})
    if traceless:
        blocks.append(NoteBlock(
            f"The simulator model of {', '.join(traceless)} prices no trace (its costs do not depend on "
            "what the run attended or moved: SimResult demand 'none'): its latency is the same for every "
            "run of that method at equal shared knobs; its accuracy is still each run's own.",
            kind="info",
        ))
    mixed = _foreign_replays(data)
    if mixed:
        blocks.append(NoteBlock(
            "These runs were replayed with a simulator model other than their own method's (a transplant "
            f"of demand between methods): {', '.join(mixed)}. Their latency is not that method's own.",
            kind="warning",
        ))
    return blocks


def _foreign_replays(data: ReportData) -> list[str]:
    """Runs whose stored simulation names another method than the run's own (should be none)."""
    out = []
    for run in [*data.baselines(), *data.trials]:
        own = sim_method(run.config)
        for profile, res in run.sim.items():
            if res.get("method") not in (None, own):
                out.append(f"{run_label(run)} on {profile} ({res.get('method')} for {own})")
    return out


def _hover(data: ReportData, run: Run, profile: str) -> str:
    return (f"{run_label(run)}: {describe_config(run.config)} ({method_kind(_method(run))})<br>"
            f"{(run.latency_s(profile) or 0.0) * _MS:.3f} ms/token, accuracy {data.accuracy(run):.3f}")


def _point(data: ReportData, run: Run, profile: str, **style: object) -> go.Scatter:
    return go.Scatter(
        x=[(run.latency_s(profile) or 0.0) * _MS], y=[data.accuracy(run)], mode="markers",
        text=[_hover(data, run, profile)], hovertemplate="%{text}<extra></extra>", **style,
    )


def _figure(data: ReportData, profile: str, methods: list[str], colors: dict[str, str]) -> FigureBlock:
    fig = go.Figure()
    used: list[Run] = []
    for method in methods:
        kind = method_kind(method)
        runs = [t for t in data.scored(profile) if _method(t) == method]
        used.extend(runs)
        name = f"{method} ({kind})"
        if runs:
            fig.add_trace(go.Scatter(
                x=[(t.latency_s(profile) or 0.0) * _MS for t in runs], y=[data.accuracy(t) for t in runs],
                mode="markers", name=name, legendgroup=method,
                text=[_hover(data, t, profile) for t in runs], hovertemplate="%{text}<extra></extra>",
                marker={"size": 9, "opacity": 0.7, "color": colors[method], "symbol": KIND_SYMBOLS[kind]},
            ))
        best = best_run(data, list(runs), profile)
        if best is not None:
            fig.add_trace(_point(data, best, profile, name=f"best {method}", legendgroup=method,
                                 marker={"size": 18, "color": "rgba(0,0,0,0)",
                                         "line": {"width": 2.5, "color": colors[method]}}))
        untuned = _untuned(data, method)
        if untuned is not None and best_run(data, [untuned], profile) is not None:
            used.append(untuned)
            fig.add_trace(_point(data, untuned, profile, name=f"untuned {method}", legendgroup=method,
                                 marker={"size": 14, "symbol": "diamond", "color": colors[method],
                                         "line": {"width": 1, "color": "#000"}}))
    dense = data.dense
    if dense is not None and dense.latency_s(profile) is not None and data.accuracy(dense) is not None:
        used.append(dense)
        fig.add_trace(_point(data, dense, profile, name="dense",
                             marker={"size": 16, "symbol": "star", "color": "#d62728",
                                     "line": {"width": 1, "color": "#000"}}))
    if data.slo_s is not None:
        add_slo_vline(fig, data.slo_s * _MS)
    fig.update_layout(
        xaxis_title=f"per-token latency on {profile} (ms, simulated from each run's own trace)",
        yaxis_title=f"{data.accuracy_metric} (measured)",
        legend={"orientation": "h", "y": -0.2},
    )
    sims = [r.sim[profile] for r in used if profile in r.sim]
    return FigureBlock(
        title=f"Methods compared on {profile}",
        figure=fig,
        caption="Each point is one run of one method: measured accuracy against the per-token latency the "
        "simulator gives for that run's own trace, replayed with the same method's model (no method is "
        "priced with another's demand). Colour: method. Marker: circle = retrieval (the whole KV stays on "
        "the host, a subset is attended), triangle = dropping (evicted tokens are gone). A ring marks "
        "each method's best point here (most accurate, then fastest); a diamond its untuned baseline; "
        "the star dense attention.",
        provenance=Provenance(
            measured=(f"accuracy ({data.accuracy_metric}) of {data.measured_model}, per method",),
            simulated=(f"mean per-token latency on {profile}, each run from its own trace",),
            mapped_from=mapped_sources(sims),
            priced=pricing_sources(sims),
        ),
    )


def _fmt(data: ReportData, run: Run | None, profile: str) -> str:
    if run is None or run.latency_s(profile) is None:
        return "-"
    return f"{data.accuracy(run):.3f} @ {(run.latency_s(profile) or 0.0) * _MS:.3f} ms ({run_label(run)})"


def _vs_dense(data: ReportData, run: Run | None) -> str:
    """The run's paired difference from dense attention on the report's metric (dse/accuracy/resolution.py);
    '-' without per-prompt scores on both sides (dense fidelity metrics are exact, never run)."""
    from dse.report.recommend import prompt_scores

    if run is None or data.dense is None:
        return "-"
    mine, dense = prompt_scores(run, data.accuracy_metric), prompt_scores(data.dense, data.accuracy_metric)
    return paired_text(mine, dense) if mine and dense else "-"


def _table(data: ReportData, methods: list[str]) -> TableBlock:
    header = ("method", "kind", "trials", *(f"best on {p}" for p in data.profiles),
              *(f"untuned on {p}" for p in data.profiles), "untuned vs dense (paired, 95%)")
    rows = []
    for method in methods:
        trials = [t for t in data.trials if _method(t) == method]
        untuned = _untuned(data, method)
        rows.append((
            method, method_kind(method), str(len(trials)),
            *(_fmt(data, best_run(data, list(trials), p), p) for p in data.profiles),
            *(_fmt(data, untuned, p) for p in data.profiles),
            _vs_dense(data, untuned),
        ))
    sims = [r.sim[p] for r in data.runs() for p in data.profiles if p in r.sim]
    return TableBlock(
        title="Each method's best point and untuned baseline",
        header=header,
        rows=tuple(rows),
        caption=f"Accuracy ({data.accuracy_metric}, measured) @ mean per-token latency (simulated from the "
        "run's own trace). Best: the method's most accurate trial on that profile, then the fastest; "
        "untuned: the method at its default knobs (baselines.untuned), '-' where the study has none. "
        "Untuned vs dense: mean(untuned) - mean(dense) over the prompts both were scored on, its 95% paired "
        "bootstrap interval, McNemar's exact p for 0/1 scores, and whether the difference is resolved at "
        "95% or about how many paired prompts would resolve it (80% power; Connor 1987 for 0/1 scores).",
        provenance=Provenance(
            measured=(f"accuracy ({data.accuracy_metric}) of {data.measured_model}",),
            simulated=("mean per-token latency per profile, each run from its own trace",),
            mapped_from=mapped_sources(sims),
            priced=pricing_sources(sims),
        ),
    )
