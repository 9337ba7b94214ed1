"""Section 1: which configurations keep accuracy and minimise latency.

Pareto fronts of measured accuracy vs simulated per-token latency, one figure per hardware profile,
with the dense and untuned baselines marked; the methods compared side by side when the study has
several (dse/report/compare.py); Optuna parameter importances per objective; tau
vs measured correction rate vs simulated latency.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import plotly.graph_objects as go

from dse.report.colors import add_slo_vline
from dse.report.compare import method_comparison_blocks
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import Block, FigureBlock, NoteBlock, Section
from dse.report.provenance import Provenance, mapped_sources, pricing_sources, study_pricing
from dse.report.simulate import sim_method
from dse.report.summary import overall_correction_rate
from dse.report.uncertainty import interval, uncertainty_blocks
from dse.results import CONFIG_KEYS

__all__ = ["pareto_front", "pareto_section"]

_MS = 1e3
_MIN_IMPORTANCE_TRIALS = 10  # distinct results (duplicates excluded): fewer cannot rank 5 knobs


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points, by increasing latency. points: (latency, accuracy) pairs;
    lower latency and higher accuracy are better; of equal points the first is kept."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best_acc = float("-inf")
    for i in order:
        if points[i][1] > best_acc:
            front.append(i)
            best_acc = points[i][1]
    return front


def _error_bars(data: ReportData, runs: list[Run]) -> dict:
    """plotly error_y: the 95% interval of each run's accuracy (zero where a run recorded none)."""
    plus, minus = [], []
    for run in runs:
        e, value = interval(data, run), data.accuracy(run)
        ok = e is not None and value is not None and not math.isnan(e.low)
        plus.append(e.high - value if ok else 0.0)
        minus.append(value - e.low if ok else 0.0)
    return {"type": "data", "array": plus, "arrayminus": minus, "visible": True, "thickness": 1.2}


def pareto_section(data: ReportData) -> Section:
    blocks: list[Block] = [_pareto_figure(data, p) for p in data.profiles]
    blocks.extend(method_comparison_blocks(data))  # two or more methods: side by side, own traces
    blocks.extend(uncertainty_blocks(data))
    blocks.extend(_importance_blocks(data))
    blocks.append(_tau_figure(data))
    return Section(
        anchor="pareto",
        title="Accuracy vs latency",
        question="Which retrieval configurations keep accuracy and minimise latency, on each "
        "hardware profile?",
        blocks=tuple(blocks),
    )


def _measured_label(data: ReportData) -> str:
    return f"accuracy ({data.accuracy_metric}) of {data.measured_model}"


def _pareto_figure(data: ReportData, profile: str) -> FigureBlock:
    runs = data.scored(profile)
    fig = go.Figure()
    _add_method_traces(fig, data, runs, profile)
    fig.add_trace(_front_trace(data, profile))
    _add_baseline_traces(fig, data, profile)
    if data.slo_s is not None:
        add_slo_vline(fig, data.slo_s * _MS)
    fig.update_layout(
        xaxis_title=f"per-token latency on {profile} (ms, simulated)",
        yaxis_title=f"{data.accuracy_metric} (measured)",
        legend={"orientation": "h", "y": -0.2},
    )
    used = [r for r in [*runs, *data.baselines()] if profile in r.sim]
    return FigureBlock(
        title=f"Pareto front on {profile}",
        figure=fig,
        caption=f"Each point is one configuration of {len(runs)} complete trials; x: mean per-token latency "
        "in ms, y: measured accuracy. The dotted line joins the runs no other beats on both axes, the "
        "baselines included: dense attention (star) and FreeKV with default knobs (diamond). Error bars: "
        "95% intervals of the measured accuracy (Wilson for proportions, bootstrap over samples for means)."
        + ("" if data.slo_s is None else f" The red dashed line is the SLO ({data.slo_s * _MS:g} ms)."),
        provenance=Provenance(
            measured=(_measured_label(data),),
            simulated=(f"mean per-token latency on {profile}",),
            mapped_from=mapped_sources(r.sim[profile] for r in used),
            priced=pricing_sources(r.sim[profile] for r in used),
        ),
    )


def _add_method_traces(fig: go.Figure, data: ReportData, runs: list[Run], profile: str) -> None:
    """One scatter trace of (latency ms, accuracy) per simulated method of the trials."""
    points = [(t.latency_s(profile) * _MS, data.accuracy(t)) for t in runs]
    for method in sorted({sim_method(t.config) for t in runs}):
        idx = [i for i, t in enumerate(runs) if sim_method(t.config) == method]
        fig.add_trace(
            go.Scatter(
                x=[points[i][0] for i in idx],
                y=[points[i][1] for i in idx],
                mode="markers",
                name=method,
                text=[f"{run_label(runs[i])}: {describe_config(runs[i].config)}" for i in idx],
                marker={"size": 9, "opacity": 0.75},
                error_y=_error_bars(data, [runs[i] for i in idx]),
                hovertemplate="%{text}<br>latency %{x:.3f} ms/token<br>accuracy %{y:.3f}<extra></extra>",
            )
        )


def _front_trace(data: ReportData, profile: str) -> go.Scatter:
    """The Pareto front over the trials and the baselines: a trial dominated by a baseline is not on it."""
    every = data.scored_runs(profile)
    every_pts = [(r.latency_s(profile) * _MS, data.accuracy(r)) for r in every]
    front = pareto_front(every_pts)
    return go.Scatter(
        x=[every_pts[i][0] for i in front],
        y=[every_pts[i][1] for i in front],
        mode="lines+markers",
        name="Pareto front",
        line={"color": "#222", "dash": "dot", "shape": "hv"},
        marker={"size": 13, "symbol": "circle-open", "color": "#222"},
        text=[f"{run_label(every[i])}: {describe_config(every[i].config)}" for i in front],
        hovertemplate="front: %{text}<extra></extra>",
    )


def _add_baseline_traces(fig: go.Figure, data: ReportData, profile: str) -> None:
    """Dense attention (star), untuned FreeKV (diamond), the other methods' untuned runs (open diamonds)."""
    marked = ((data.dense, "star", "#d62728"), (data.untuned, "diamond", "#ff7f0e"),
              *((b, "diamond-open", "#ff7f0e") for b in data.results.untuned_methods))
    for run, symbol, color in marked:
        if run is not None and run.latency_s(profile) is not None and data.accuracy(run) is not None:
            fig.add_trace(
                go.Scatter(
                    x=[run.latency_s(profile) * _MS],
                    y=[data.accuracy(run)],
                    mode="markers",
                    name=run_label(run),
                    error_y=_error_bars(data, [run]),
                    marker={
                        "size": 16,
                        "symbol": symbol,
                        "color": color,
                        "line": {"width": 1, "color": "#000"},
                    },
                    hovertemplate=f"{run_label(run)}: {describe_config(run.config)}<br>%{{x:.3f}} "
                    f"ms/token, accuracy %{{y:.3f}}"
                    "<extra></extra>",
                )
            )


def _importance_blocks(data: ReportData) -> list[Block]:
    """Optuna parameter importances per objective. The knobs of `config` are the study's Optuna
    parameters (dse/search_space.py), so the guard needs no Optuna; Optuna is opened only to compute."""
    res = data.results
    complete = [t for t in res.completed if t.values is not None and t.duplicate_of is None]
    # a method's own knob (tau: FreeKV only) is no parameter of the other methods' trials: PED-ANOVA ranks
    # the parameters every trial drew
    varied = sorted(k for k in CONFIG_KEYS if len({repr(t.config.get(k)) for t in complete}) > 1
                    and all(t.config.get(k) is not None for t in complete))
    if len(complete) < _MIN_IMPORTANCE_TRIALS or not varied:
        return [
            NoteBlock(
                f"Parameter importances need at least {_MIN_IMPORTANCE_TRIALS} distinct complete trials "
                f"(repeated configurations counted once) with at least one parameter that varies; this "
                f"study has {len(complete)} distinct complete trial(s) and {len(varied)} varied "
                "parameter(s), too few to tell which knobs matter, so importances are not shown.",
                kind="warning",
            )
        ]
    import optuna

    study = optuna.load_study(study_name=res.study_name, storage=res.storage_url)
    blocks: list[Block] = []
    # PED-ANOVA (no scikit-learn needed, deterministic); the top quantile holds at least ~5 trials.
    quantile = min(0.5, max(0.1, 5 / len(complete)))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    for i, (name, direction) in enumerate(zip(res.objective_names, res.directions, strict=True)):
        values = {t.values[i] for t in complete if t.values is not None}
        note = _too_few_values_note(name, values, len(complete))
        if note is not None:
            blocks.append(note)
            continue
        try:
            imp = _importances(study, evaluator, varied, i, direction)
        except (ValueError, RuntimeError) as exc:
            blocks.append(
                NoteBlock(f"Parameter importances for {name} could not be computed: {exc}", kind="warning")
            )
            continue
        blocks.append(_importance_figure(data, name, direction, imp, quantile, len(complete)))
    return blocks


def _too_few_values_note(name: str, values: set[float], n_complete: int) -> NoteBlock | None:
    """Why an objective with too few distinct values gets no importances; None when it has enough."""
    if 2 <= len(values) < _MIN_IMPORTANCE_TRIALS // 2:
        return NoteBlock(
            f"{name} takes only {len(values)} distinct values over {n_complete} trials: too few "
            "to rank parameters by, so no importances for this objective.",
            kind="info",
        )
    if len(values) < 2:
        return NoteBlock(
            f"{name} is {next(iter(values)):g} in every complete trial, so no parameter explains "
            "it: no importances for this objective.",
            kind="info",
        )
    return None


def _importances(study: Any, evaluator: Any, varied: list[str], i: int, direction: str) -> dict[str, float]:
    """PED-ANOVA importances of the varied parameters for objective i (raises ValueError, RuntimeError)."""
    import optuna

    sign = -1.0 if direction == "maximize" else 1.0  # PED-ANOVA treats lower as better
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna warns that small studies give rough importances
        return optuna.importance.get_param_importances(
            study,
            evaluator=evaluator,
            params=varied,
            target=lambda t, i=i, sign=sign: sign * t.values[i],
        )


def _importance_figure(
    data: ReportData, name: str, direction: str, imp: dict[str, float], quantile: float, n_complete: int
) -> FigureBlock:
    params = list(imp)[::-1]
    fig = go.Figure(
        go.Bar(x=[imp[p] for p in params], y=params, orientation="h", marker={"color": "#4c72b0"})
    )
    fig.update_layout(
        xaxis={"title": "importance (PED-ANOVA, share of the total)", "rangemode": "tozero"},
        yaxis_title="parameter",
    )
    measured = name in {k for t in data.trials for k in t.accuracy}
    return FigureBlock(
        title=f"Parameter importances for {name} ({direction})",
        figure=fig,
        caption=f"How much each searched parameter matters for reaching the best "
        f"{quantile:.0%} of {name} over {n_complete} complete trials (Optuna PED-ANOVA; "
        "parameters that never varied are left out). Importances of a small study are rough.",
        provenance=Provenance(
            measured=(f"{name} of {data.measured_model}",) if measured else (),
            simulated=() if measured else (f"objective {name}",),
            priced=() if measured else study_pricing(data.results.config),
        ),
        height_px=max(260, 60 + 40 * len(params)),
    )


def _tau_figure(data: ReportData) -> Block:
    profile = data.profiles[0]
    runs: list[Run] = [
        t
        for t in data.trials
        if t.config.get("tau") is not None
        and overall_correction_rate(t.trace_summary) is not None
        and t.latency_s(profile) is not None
    ]
    if not runs:
        return NoteBlock(
            "No trial records both a tau and a measured correction rate, so tau vs correction rate "
            "is not shown.",
            kind="warning",
        )
    lat = [t.latency_s(profile) * _MS for t in runs]
    fig = go.Figure(
        go.Scatter(
            x=[t.config["tau"] for t in runs],
            y=[overall_correction_rate(t.trace_summary) for t in runs],
            mode="markers",
            text=[f"{run_label(t)}: {describe_config(t.config)}" for t in runs],
            marker={
                "size": 11,
                "color": lat,
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "ms/token"}},
            },
            hovertemplate="%{text}<br>tau %{x}<br>correction rate %{y:.3f}<br>%{marker.color:.3f} ms/token"
            "<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis_title="tau (correction threshold)",
        yaxis_title="share of (step, layer, KV head) corrected (measured)",
    )
    return FigureBlock(
        title=f"tau vs correction rate vs latency on {profile}",
        figure=fig,
        caption="A head is corrected when the group-mean cosine similarity of adjacent queries falls "
        "below tau: a higher tau corrects more heads, which puts selection and recall on the critical "
        "path. Colour: simulated mean per-token latency in ms.",
        provenance=Provenance(
            measured=(f"correction rate of {data.measured_model} (trace)",),
            simulated=(f"per-token latency on {profile}",),
            mapped_from=mapped_sources(t.sim[profile] for t in runs),
            priced=pricing_sources(t.sim[profile] for t in runs),
        ),
    )
