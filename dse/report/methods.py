"""Section 4, last part: every simulated method side by side on every profile.

Each method of the simulator's registry that is installed and replays the capacity run's demand (the
methods of that run's policy, and those that need no demand: each model replays its own policy's trace,
the others are named in the closing note) runs at the study's workload with the same budget knobs and
the same measured demand as the capacity grid, in both implementation
modes: the study's (`implementation:`, default as-published: each method as its public code runs it,
with the software profile's host costs) and the other one (ideal: hardware limits), side by side.
Accuracy is shown only where the study measured that method (the dense baseline, the trials' methods).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dse.report.colors import add_slo_hline
from dse.report.data import ReportData, Run, describe_config, run_label
from dse.report.page import Block, FigureBlock, NoteBlock, TableBlock
from dse.report.provenance import Provenance, pricing_sources
from dse.report.sampled import sampled_decode
from dse.report.simulate import ReplayDemand, Replays, sim_config, sim_method, workload

__all__ = ["methods_blocks", "measured_accuracy_by_method"]

_MODES = {
    "as-published": "each method as its public code runs it, with the software profile's host costs",
    "ideal": "the same algorithm at hardware limits, no software costs",
}
_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def measured_accuracy_by_method(data: ReportData) -> dict[str, float]:
    """Simulator method name -> best measured accuracy of the study's runs with that method."""
    best: dict[str, float] = {}
    for run in [*data.baselines(), *data.trials]:
        acc = data.accuracy(run)
        if acc is not None:
            m = sim_method(run.config)
            best[m] = max(acc, best.get(m, float("-inf")))
    return best


@dataclass
class _Comparison:
    """What the methods comparison collects over the profiles: profile -> method -> SimResult dict in the
    study's implementation mode (`results`) and in the other one (`other`); method -> why it was not
    compared (`failed`); the replayed runs and their demand's sources, for the provenance."""

    results: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    other: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    runs: set[str] = field(default_factory=set)
    mapped: set[str] = field(default_factory=set)
    synthetic: set[str] = field(default_factory=set)


def methods_blocks(data: ReportData, replays: Replays, seed: int = 0) -> list[Block]:
    w = workload(data)
    steps = int(w["output_tokens"])
    batch, input_tokens = int(w["batch_sizes"][0]), int(w["input_tokens"])
    primary = str(data.results.config.get("implementation") or "as-published")
    modes = [primary, "ideal" if primary == "as-published" else "as-published"]
    comparison = _Comparison()
    for profile in data.profiles:
        replay = replays.get(profile)
        if replay is None:
            continue
        _replay_methods(comparison, data, profile, *replay, seed, modes, batch, input_tokens, steps)
    results, other = comparison.results, comparison.other
    if not results:
        return [NoteBlock("No run has demand to replay, so methods are not compared.", kind="warning")]
    methods = list(dict.fromkeys(m for per in results.values() for m in per))
    accuracy = measured_accuracy_by_method(data)
    prov = _provenance(data, comparison)
    blocks: list[Block] = [
        _figure(results, other, modes, methods, accuracy, data, prov, batch, input_tokens, steps),
        _table(results, other, modes, methods, accuracy, data, prov),
    ]
    note = _not_compared_note(comparison.failed)
    if note is not None:
        blocks.append(note)
    return blocks


def _replay_methods(
    comparison: _Comparison,
    data: ReportData,
    profile: str,
    run: Run,
    demand: ReplayDemand,
    seed: int,
    modes: list[str],
    batch: int,
    input_tokens: int,
    steps: int,
) -> None:
    """Every method that replays the run's demand on `profile`, in both implementation modes."""
    from sim import load_profile
    from sim.errors import SimInputError
    from sim.methods import available_methods
    from sim.replay.rules import replayable_methods

    comparison.runs.add(f"{run_label(run)} ({describe_config(run.config)})")
    if demand.mapped_from:
        comparison.mapped.add(demand.mapped_from)
    if demand.synthetic:
        comparison.synthetic.add(demand.synthetic)
    loaded = load_profile(profile)
    own, refused = replayable_methods(available_methods(), demand.demand)
    for name in refused:  # each model replays its own policy's trace (sim/replay/rules.py)
        comparison.failed[name] = ("needs recall demand; the trace is of dense attention"
                                   if demand.demand.dense_attention
                                   else f"replays its own policy's traces, not {demand.demand.method}'s")
    for method in own:
        for mode, store in zip(modes, (comparison.results, comparison.other), strict=True):
            cfg = sim_config(
                data,
                run.config,
                profile,
                batch_size=batch,
                input_tokens=input_tokens,
                output_tokens=steps,
                method=method,
                implementation=mode,
            )
            try:
                store.setdefault(profile, {})[method] = sampled_decode(cfg, demand.demand, seed, loaded)
            except SimInputError as exc:
                comparison.failed[method] = str(exc)


def _provenance(data: ReportData, comparison: _Comparison) -> Provenance:
    results, other = comparison.results, comparison.other
    return Provenance(
        simulated=(f"per-token latency, throughput and memory of {data.model} per method and profile",),
        measured=(
            f"demand of {', '.join(sorted(comparison.runs))}",
            f"{data.accuracy_metric} where the study ran the method",
        ),
        mapped_from=tuple(comparison.mapped),
        synthetic=tuple(comparison.synthetic),
        priced=pricing_sources(d for per in (*results.values(), *other.values()) for d in per.values()),
    )


def _not_compared_note(failed: dict[str, str]) -> NoteBlock | None:
    """The methods left out and why; None if none."""
    notes = [f"{m}: {msg}" for m, msg in failed.items()]
    if notes:
        return NoteBlock("Methods not compared — " + "; ".join(notes), kind="warning")
    return None


def _figure(
    results: dict[str, dict[str, dict]],
    other: dict[str, dict[str, dict]],
    modes: list[str],
    methods: list[str],
    accuracy: dict[str, float],
    data: ReportData,
    prov: Provenance,
    batch: int,
    input_tokens: int,
    steps: int,
) -> FigureBlock:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("per-token latency (ms)", "throughput (tokens/s)"))
    series = [(profile, per, modes[0], 1.0, "") for profile, per in results.items()]
    series += [(profile, per, modes[1], 0.45, "/") for profile, per in other.items()]
    for profile, per, mode, opacity, pattern in series:
        color = _COLORS[list(results).index(profile) % len(_COLORS)] if profile in results else _COLORS[0]
        present = [m for m in methods if m in per]
        marker = {"color": color, "opacity": opacity, "pattern": {"shape": pattern}}
        acc_text = _accuracy_texts(data, accuracy, present)
        _add_mode_bars(fig, f"{profile}, {mode}", per, present, acc_text, marker)
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")  # bars start at zero (a log axis would make bars of ratios)
    fig.update_yaxes(title_text="ms per token", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=1, col=2)
    if data.slo_s is not None:
        add_slo_hline(fig, data.slo_s * 1e3, label=f"SLO {data.slo_s * 1e3:g} ms", row=1, col=1)
    return FigureBlock(
        title="Methods side by side",
        figure=fig,
        caption=f"{data.model}, batch {batch}, prompt {input_tokens} tokens and {steps} output tokens "
        "(memory at the final context, latency sampled over the whole decode); per-token latency in ms, "
        "throughput in tokens/s, both axes from zero; the same budget knobs and measured demand for "
        "every method (methods that need no trace, such as dense, ignore it); a method whose batch "
        "does not fit memory has no bar (out of "
        "memory). Solid bars: the study's implementation mode "
        f"({modes[0]}); hatched: {modes[1]} ({_MODES[modes[1]]}). Hover for measured accuracy where the "
        "study ran the method.",
        provenance=prov,
        height_px=500,
    )


def _accuracy_texts(data: ReportData, accuracy: dict[str, float], present: list[str]) -> list[str]:
    """Hover text per method: its measured accuracy, or that the study did not measure it."""
    return [
        f"{data.accuracy_metric} {accuracy[m]:.3f} (measured)"
        if m in accuracy
        else "accuracy not measured in this study"
        for m in present
    ]


def _add_mode_bars(
    fig: go.Figure, label: str, per: dict[str, dict], present: list[str], acc_text: list[str], marker: dict
) -> None:
    """One profile's bars in one implementation mode: latency (left panel) and throughput (right)."""
    fig.add_trace(
        go.Bar(
            x=present,
            y=[_latency_ms(per[m]) for m in present],
            name=label,
            legendgroup=label,
            marker=marker,
            text=acc_text,
            textposition="none",
            hovertemplate=f"{label}<br>%{{x}}: %{{y:.3f}} ms/token<br>%{{text}}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=present,
            y=[None if per[m].get("oom") else per[m]["throughput_tokens_per_s"] for m in present],
            name=label,
            legendgroup=label,
            showlegend=False,
            marker=marker,
            text=acc_text,
            textposition="none",
            hovertemplate=f"{label}<br>%{{x}}: %{{y:.0f}} tokens/s<br>%{{text}}<extra></extra>",
        ),
        row=1,
        col=2,
    )


def _latency_ms(res: dict) -> float | None:
    return None if res.get("oom") else res["per_token_latency_s"]["mean"] * 1e3


def _latency_cell(res: dict | None) -> str:
    if res is None:
        return "-"
    if res.get("oom"):
        return "out of memory"
    lat = res["per_token_latency_s"]
    return f"{lat['mean'] * 1e3:.3f} / {lat['p99'] * 1e3:.3f}"


def _table(
    results: dict[str, dict[str, dict]],
    other: dict[str, dict[str, dict]],
    modes: list[str],
    methods: list[str],
    accuracy: dict[str, float],
    data: ReportData,
    prov: Provenance,
) -> TableBlock:
    profiles = list(results)
    header = (
        "method",
        f"{data.accuracy_metric} (measured)",
        *(f"ms/token mean / p99 on {p} ({mode})" for p in profiles for mode in modes),
        *(f"largest batch on {p}" for p in profiles),
    )
    rows = []
    for m in methods:
        lat = [_latency_cell(per.get(p, {}).get(m)) for p in profiles for per in (results, other)]
        fit = [
            str(results[p][m].get("memory", {}).get("max_batch", "-")) if m in results[p] else "-"
            for p in profiles
        ]
        rows.append((m, f"{accuracy[m]:.3f}" if m in accuracy else "not measured", *lat, *fit))
    return TableBlock(
        title="Methods side by side (table)",
        header=header,
        rows=tuple(rows),
        caption=f"Simulated at the same workload as the figure above; {modes[0]} is the study's "
        f"implementation mode, {modes[1]} the other ({', '.join(f'{k}: {v}' for k, v in _MODES.items())}).",
        provenance=prov,
    )
