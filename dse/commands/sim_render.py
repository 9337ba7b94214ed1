"""How `dse sim` shows its results: tables (rich), JSON, CSV and timelines (plotly HTML, Chrome trace).

`by_mode[implementation][method]` -> SimResult is what each function takes (one batch); `skipped` the
methods left out and why. Never imports torch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["console", "print_single", "print_comparison", "json_payload", "write_csv", "write_timelines",
           "speedups", "ms"]


def ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


_CSV_COLUMNS = ("batch", "method", "implementation", "oom", "mean_ms", "p50_ms", "p99_ms", "tokens_per_s",
                "prefill_s", "gpu_gib", "host_gib", "max_batch", "memory_limit", "demand")


def write_csv(path: Path, batches: list[int], runs: list) -> None:
    import csv
    import io

    from dse.paths import write_text

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(_CSV_COLUMNS)
    for batch, (by_mode, _) in zip(batches, runs, strict=True):
        for impl, results in by_mode.items():
            for name, res in results.items():
                d = res.to_dict()
                lat, mem = d["per_token_latency_s"] or {}, d["memory"]
                ms = [f"{lat[k] * 1e3:.4f}" if lat else "" for k in ("mean", "p50", "p99")]
                writer.writerow([batch, name, impl, res.oom, *ms,
                                 "" if res.oom else f"{d['throughput_tokens_per_s']:.3f}",
                                 "" if res.oom else f"{d['prefill_s']:.4f}",
                                 f"{mem['gpu_bytes'] / 2**30:.3f}", f"{mem['host_bytes'] / 2**30:.3f}",
                                 mem["max_batch"], mem["limit"], d["demand"]])
    write_text(path, buf.getvalue(), "--csv")


def json_payload(by_mode: dict, skipped: dict, modes: list[str], method: str, cli_notes: list[str],
                  trace_info: Any) -> dict[str, Any]:
    results = by_mode[modes[0]]
    if method == "all":
        payload: dict[str, Any] = {
            "implementation": modes[0],
            "results": {k: r.to_dict() for k, r in results.items()},
            "speedup": speedups(results),
            "skipped": skipped,
            "notes": cli_notes,
        }
        if len(modes) > 1:
            payload["results_by_implementation"] = {
                impl: {k: r.to_dict() for k, r in rs.items()} for impl, rs in by_mode.items()
            }
    elif len(modes) > 1:
        payload = {impl: rs[method].to_dict() for impl, rs in by_mode.items()}
        for one in payload.values():
            one["notes"] = cli_notes + one["notes"]
            one["trace"] = trace_info
    else:
        payload = results[method].to_dict()
        payload["notes"] = cli_notes + payload["notes"]
    if len(modes) == 1 or method == "all":
        payload["trace"] = trace_info
    return payload


def speedups(results: dict) -> dict[str, dict[str, float | None]]:
    """speedup[a][b] = mean latency of b / mean latency of a (how much faster a is than b); None where
    either is out of memory (no latency)."""
    lat = {k: r.latency_stats()["mean"] for k, r in results.items()}
    return {a: {b: None if results[a].oom or results[b].oom else lat[b] / lat[a] for b in lat} for a in lat}


def write_timelines(results: dict, steps: list[int], html: Path | None, chrome: Path | None) -> None:
    if html is None and chrome is None:
        return
    from sim.timeline import timeline_figure, write_chrome_trace

    events = []
    for name, res in results.items():
        if res.oom:  # nothing was timed
            continue
        for step in steps:
            evs = res.timeline(step)
            if len(results) > 1:
                evs = [{**e, "stream": f"{name}/{e['stream']}"} for e in evs]
            events += evs
    if not events:
        from sim import SimInputError

        raise SimInputError("--timeline/--chrome-trace: nothing to draw, every method is out of memory")
    first = next(iter(results.values()))
    label = (
        f"{first.model} on {first.hardware}, batch {first.batch_size}; demand: {first.demand_label}; "
        f"priced {first.pricing_label}"
    )
    from dse.errors import DseError
    from dse.paths import describe_os_error
    from traces.atomic_write import atomic_write_text

    flag, path = "--chrome-trace", chrome
    try:  # each file whole or not at all: a failed write leaves the previous file as it was
        if chrome is not None:
            write_chrome_trace(events, chrome, process_name=f"freekv-dse sim: {label}")
        if html is not None:
            flag, path = "--timeline", html
            title = f"stream timeline, steps {steps} ({', '.join(results)}): {label}"
            atomic_write_text(html, timeline_figure(events, title).to_html(include_plotlyjs=True))
    except OSError as exc:
        raise DseError(
            f"{flag} {path}: cannot write ({describe_os_error(exc)}); any previous file there is unchanged"
        ) from None


def console():
    from rich.console import Console

    out = Console()
    if not out.is_terminal and out.width < 160:  # piped output: do not squeeze the tables
        out = Console(width=160)
    return out


def print_single(res) -> None:
    from rich.table import Table

    d = res.to_dict()
    out = console()
    lat = d["per_token_latency_s"]
    out.print(
        f"[bold]{res.method}[/] on [bold]{res.hardware}[/], {res.model}, batch {res.batch_size}; "
        f"demand: {d['demand']}; priced {res.pricing_label}"
    )
    if res.oom:
        out.print(f"[red]{res.oom_message}[/]")
        for note in d["notes"][1:]:
            out.print(f"[yellow]note:[/] {note}")
        return
    for note in d["notes"]:
        out.print(f"[yellow]note:[/] {note}")
    table = Table(title="per-token decode latency and throughput")
    shares = ("select share", "recall share", "host share")
    for col in ("mean ms", "p50 ms", "p99 ms", "prefill s", "tokens/s", *shares):
        table.add_column(col, justify="right")
    table.add_row(
        ms(lat["mean"]),
        ms(lat["p50"]),
        ms(lat["p99"]),
        f"{d['prefill_s']:.3f}",
        f"{d['throughput_tokens_per_s']:.1f}",
        f"{d['critical_share']['select']:.1%}",
        f"{d['critical_share']['recall']:.1%}",
        f"{d['critical_share']['host']:.1%}",
    )
    out.print(table)
    bd = Table(title="critical-path breakdown per step")
    bd.add_column("operation")
    bd.add_column("ms", justify="right")
    bd.add_column("share", justify="right")
    total = sum(d["breakdown_s"].values()) or 1.0
    for op, v in sorted(d["breakdown_s"].items(), key=lambda kv: -kv[1]):
        bd.add_row(op, ms(v), f"{v / total:.1%}")
    out.print(bd)
    mem = d["memory"]
    gib = 2**30
    out.print(
        f"memory: GPU {mem['gpu_bytes'] / gib:.2f} / {mem['gpu_capacity_bytes'] / gib:.1f} GiB usable"
        f"{_of_total(mem)}, host "
        f"{mem['host_bytes'] / gib:.2f} / {mem['host_capacity_bytes'] / gib:.1f} GiB, "
        f"{'fits' if mem['fits'] else '[red]OUT OF MEMORY[/]'}; largest batch that fits: {mem['max_batch']} "
        f"(bound by {mem['limit']})"
    )
    util = d["link_utilisation"]
    out.print(f"host link utilisation: h2d {util['h2d']:.1%}, d2h {util['d2h']:.1%}")


def print_comparison(by_mode: dict[str, dict], skipped: dict[str, str]) -> None:
    """One row per method; a mean-latency column per implementation mode (as-published, ideal)."""
    from rich.table import Table

    out = console()
    modes = list(by_mode)
    results = by_mode[modes[0]]
    first = next(iter(results.values()))
    labels = {r.demand_label for r in results.values() if r.mapped_from or r.synthetic}
    labels = labels or {r.demand_label for r in results.values() if not r.demand_label.startswith("none")}
    out.print(
        f"[bold]{first.model}[/] on [bold]{first.hardware}[/], batch {first.batch_size}; "
        f"demand: {', '.join(sorted(labels)) or 'none'}"
    )
    out.print(
        "pricing: "
        + "; ".join(f"{m}: {next(iter(rs.values())).pricing_label}" for m, rs in by_mode.items() if rs)
        + f". Other columns: {modes[0]}."
    )
    table = Table(title="methods compared (per-token decode latency)")
    mean_cols = [f"mean ms {m}" for m in modes]
    shares = ("select", "recall", "host")  # critical_share categories
    for col in ("method", *mean_cols, "p99 ms", "tokens/s", *shares, "memory", "top of breakdown"):
        table.add_column(col, justify="left" if col in ("method", "memory", "top of breakdown") else "right")
    for name, res in results.items():
        d = res.to_dict()
        lat, mem = d["per_token_latency_s"], d["memory"]
        if res.oom:
            table.add_row(name, *["-"] * (len(modes) + 5), f"[red]OOM[/] (max batch {mem['max_batch']})",
                          res.oom_message)
            continue
        top = sorted(d["breakdown_s"].items(), key=lambda kv: -kv[1])[:3]
        means = [ms(by_mode[m][name].latency_stats()["mean"]) if name in by_mode[m] else "-" for m in modes]
        table.add_row(
            name,
            *means,
            ms(lat["p99"]),
            f"{d['throughput_tokens_per_s']:.1f}",
            f"{d['critical_share']['select']:.1%}",
            f"{d['critical_share']['recall']:.1%}",
            f"{d['critical_share']['host']:.1%}",
            ("fits" if mem["fits"] else "[red]OOM[/]") + f" (max batch {mem['max_batch']})",
            ", ".join(f"{op} {ms(v)}" for op, v in top),
        )
    out.print(table)
    sp = speedups(results)
    st = Table(title=f"speedup ({modes[0]}): row method against column method (column latency / row latency)")
    st.add_column("")
    for b in sp:
        st.add_column(b, justify="right")
    for a, row in sp.items():
        st.add_row(a, *[f"{x:.2f}x" if x is not None and math.isfinite(x) else "-" for x in row.values()])
    out.print(st)
    for name, why in skipped.items():
        out.print(f"[yellow]skipped[/] {name}: {why}")
    for name, res in results.items():
        for note in res.notes:
            out.print(f"[yellow]{name}:[/] {note}")


def _of_total(mem: dict) -> str:
    """' (0.9 of 80.0 GiB)' when the usable GPU memory is a share of the profile's (sim.memory)."""
    total, share = mem.get("gpu_total_bytes"), mem.get("gpu_memory_utilization")
    if not total or share is None or share >= 1.0:
        return ""
    return f" ({share:g} of {total / 2**30:.1f} GiB)"
