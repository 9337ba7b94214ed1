"""Stream timelines of chosen decode steps: Chrome trace JSON (chrome://tracing, Perfetto) and plotly.

Input: events as returned by `SimResult.timeline(step)`: dicts {name, stream, start_s, end_s, step,
layer}. One row (Chrome "thread") per stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["to_chrome_trace", "write_chrome_trace", "timeline_figure", "STREAM_ORDER"]

STREAM_ORDER = ("host", "compute", "side", "recall_sync", "recall_bg", "offload", "h2d", "d2h", "join")


def _streams(events: Sequence[dict[str, Any]]) -> list[str]:
    present = {e["stream"] for e in events}
    return [s for s in STREAM_ORDER if s in present] + sorted(present - set(STREAM_ORDER))


def to_chrome_trace(events: Iterable[dict[str, Any]], process_name: str = "freekv-dse sim") -> dict[str, Any]:
    """Chrome trace event format: complete events ("ph": "X"), microseconds, one tid per stream."""
    events = list(events)
    tids = {s: i for i, s in enumerate(_streams(events))}
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": process_name}}
    ]
    out += [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": t, "args": {"name": s}} for s, t in tids.items()
    ]
    for e in events:
        out.append(
            {
                "name": e["name"],
                "cat": e["stream"],
                "ph": "X",
                "pid": 0,
                "tid": tids[e["stream"]],
                "ts": e["start_s"] * 1e6,
                "dur": (e["end_s"] - e["start_s"]) * 1e6,
                "args": {"step": e["step"], "layer": e["layer"]},
            }
        )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(
    events: Iterable[dict[str, Any]], path: str | Path, process_name: str = "freekv-dse sim"
) -> Path:
    from traces.atomic_write import atomic_write_text

    path = Path(path)
    atomic_write_text(path, json.dumps(to_chrome_trace(events, process_name)))
    return path


def timeline_figure(events: Iterable[dict[str, Any]], title: str = "stream timeline"):
    """A plotly Figure: one horizontal row per stream, one bar per event (ms), hover shows op/layer."""
    import plotly.graph_objects as go

    events = list(events)
    streams = _streams(events)
    fig = go.Figure()
    names = sorted({e["name"] for e in events})
    palette = [
        "#4C78A8",
        "#F58518",
        "#54A24B",
        "#E45756",
        "#72B7B2",
        "#EECA3B",
        "#B279A2",
        "#FF9DA6",
        "#9D755D",
        "#BAB0AC",
    ]
    for i, name in enumerate(names):
        evs = [e for e in events if e["name"] == name]
        fig.add_trace(
            go.Bar(
                name=name,
                y=[e["stream"] for e in evs],
                x=[(e["end_s"] - e["start_s"]) * 1e3 for e in evs],
                base=[e["start_s"] * 1e3 for e in evs],
                orientation="h",
                marker_color=palette[i % len(palette)],
                customdata=[[e["layer"], e["step"]] for e in evs],
                hovertemplate=f"{name}<br>layer %{{customdata[0]}}, step %{{customdata[1]}}"
                "<br>%{base:.3f} ms + %{x:.3f} ms<extra></extra>",
            )
        )
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis_title="time (ms)",
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(streams))},
        height=120 + 40 * len(streams),
    )
    return fig
