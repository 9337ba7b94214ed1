"""Print `dse serve`'s answer: the question with its SLOs, each scheduler's cost model, one row per
(profile, method, scheduler), what broke where nothing met the SLOs, and the notes. Never imports torch."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

__all__ = ["print_serve"]


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _range(lo: Any, hi: Any, spec: str) -> str:
    if lo is None:
        return "-"
    a, b = format(lo, spec), format(hi, spec)
    return a if a == b else f"{a}-{b}"


def _why(r: dict) -> str:
    return "; ".join(f["text"] for f in r["failures"]) or "no verdict recorded"


def _slo_names(r: dict) -> str:
    return ", ".join(f["slo"] for f in r["failures"]) or "-"


def _print_failures(console: Any, payload: dict, fleet: bool) -> None:
    """One line per row where nothing met the SLOs: which p99 broke which limit, by how much."""
    for r in payload["results"]:
        if r["meets"]:
            continue
        where = f"{r['hardware']}, {r['method']}, {r['scheduler']}"
        if fleet and r.get("impossible"):
            f = r["impossible"]
            console.print(
                f"[red]{where}[/]: one sequence alone decodes at {f['value_s'] * 1e3:.3g} ms per token "
                f"({f['value_s'] / f['limit_s']:.2f}x the {f['limit_s'] * 1e3:g} ms per-token limit): no "
                "fleet meets it"
            )
            continue
        if fleet:
            scope = f"no fleet of up to {payload['max_gpus']} GPUs meets the SLOs"
        elif r["mode"] == "highest rate under the SLOs":
            scope = "no rate meets the SLOs; at the lowest rate tried"
        else:
            scope = "the SLOs are not met"
        console.print(f"[red]{where}[/]: {scope}: {_why(r)}")


def _rate_table(payload: dict) -> Any:
    from rich.table import Table

    from dse.commands.capacity_print import accuracy_text

    measured = any(r["accuracy"] is not None for r in payload["results"])
    table = Table(title="serving (accuracy measured; rates, latencies, tokens/s simulated; p50s and TBT p90 "
                  "in --json)")
    cols = ["hardware", "method", "scheduler", "GPUs", "knobs"] + (["accuracy", "floor"] if measured else [])
    cols += [
        "rate req/s",
        "TTFT p99 s",
        "TPOT p99 ms",
        "TBT p50 ms",
        "TBT p99 ms",
        "tokens/s",
        "goodput req/s",
        "SLO met",
        "max batch",
    ]
    for col in cols:
        left = col in ("hardware", "method", "scheduler", "knobs", "floor")
        table.add_column(col, justify="left" if left else "right")
    for r in payload["results"]:
        st = r["stats"]
        method = r["method"] + (" (transplanted)" if r["transplanted_method"] else "")
        gpus = f"{r['prefill_gpus']}+{r['gpus']}" if r["prefill_gpus"] else str(r["gpus"])
        head = [r["hardware"], method, r["scheduler"], gpus, r["knobs"]]
        head += [accuracy_text(r), r["floor_verdict"]] if measured else []
        if r["mode"] == "highest rate under the SLOs" and not r["meets"]:
            table.add_row(*head, f"0: {_slo_names(r)} (below)", *["-"] * (len(cols) - len(head) - 1))
            continue
        rate = "-" if r["rate_per_s"] is None else f"{r['rate_per_s']:.3g}"
        table.add_row(
            *head,
            rate,
            _s(st["ttft_p99_s"]),
            _ms(st["tpot_p99_s"]),
            _ms(st["tbt_p50_s"]),
            _ms(st["tbt_p99_s"]),
            f"{st['throughput_tokens_per_s']:.0f}",
            f"{st['goodput_requests_per_s']:.3g}",
            f"{st['slo_attainment']:.0%}",
            str(st["max_batch"]),
        )
    return table


def _split(r: dict) -> str:
    """A disaggregated fleet's prefill + decode GPUs (ranges over seeds) and prefill share: '7-8+9-11 44%'."""
    if r["scheduler"] != "disaggregated":
        return "-"
    seeds = [p for p in r["per_seed"] if p is not None]
    pre = [p["prefill_gpus"] for p in seeds]
    dec = [p["gpus"] for p in seeds]
    share = _range(r["prefill_share_min"], r["prefill_share_max"], ".0%")
    return f"{_range(min(pre), max(pre), 'd')}+{_range(min(dec), max(dec), 'd')} {share}"


def _fleet_table(payload: dict) -> Any:
    from rich.table import Table

    from dse.commands.capacity_print import accuracy_text

    priced = bool(payload["prices"])
    measured = any(r["accuracy"] is not None for r in payload["results"])
    table = Table(
        title=f"fewest GPUs at {payload['target_rate_per_s']:g} req/s, range over "
        f"{payload['seeds']} arrival seeds (GPUs, latencies simulated)"
    )
    cols = ["hardware", "method", "scheduler", "knobs"] + (["accuracy", "floor"] if measured else [])
    cols += ["GPUs", "prefill+decode", "binds", "TTFT p99 s", "TPOT p99 ms", "TBT p99 ms"]
    cols += ["$/h", "$/M out tok"] if priced else []
    for col in cols:
        left = col in ("hardware", "method", "scheduler", "knobs", "floor", "binds")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    for r in payload["results"]:
        method = r["method"] + (" (transplanted)" if r["transplanted_method"] else "")
        head = [r["hardware"], method, r["scheduler"], r["knobs"]]
        head += [accuracy_text(r), r["floor_verdict"]] if measured else []
        if not r["meets"]:
            table.add_row(*head, f"none: {_slo_names(r)} (below)", *["-"] * (len(cols) - len(head) - 1))
            continue
        share = _split(r)
        binds = ", ".join(r["binding_slos"]) or "keeping up (floor)"
        row = [
            *head,
            _range(r["gpus_min"], r["gpus_max"], "d"),
            share,
            binds,
            _s(r["ttft_p99_s_max"]),
            _ms(r["tpot_p99_s_max"]),
            _ms(r["tbt_p99_s_max"]),
        ]
        if priced:
            row += [
                _range(r.get("usd_per_hour_min"), r.get("usd_per_hour_max"), ",.0f"),
                _range(
                    r.get("usd_per_million_output_tokens_min"),
                    r.get("usd_per_million_output_tokens_max"),
                    ",.2f",
                ),
            ]
        table.add_row(*row)
    return table


def print_serve(payload: dict) -> None:
    from dse.commands.sim_render import console as make_console

    console = make_console()
    n = payload["n_requests"]
    stream = f"{n} requests per stream" if n else "streams of four request lifetimes (at least 200 requests)"
    console.print(
        f"[bold]{payload['model']}[/], requests of {payload['input_tokens']} input + "
        f"{payload['output_tokens']} output tokens, {stream}, seed {payload['seed']}; SLOs: "
        f"{payload['slos']['text']}; router {payload['router']}; priced {payload['implementation']}"
    )
    console.print(f"demand: {payload['demand']['label']}")
    console.print(f"serving model: {payload['model_of_serving']}")
    for text in payload["schedulers"].values():
        console.print(f"  scheduler {text}")
    console.print(f"  engine {payload['engine']['text']} (--engine; host time added to every iteration)")
    for text in payload.get("tensor_parallel", {}).get("text", []):
        console.print(f"  {text}; GPUs below are replicas x GPUs per replica")
    fleet = payload["mode"] == "fewest GPUs at the target rate"
    console.print(_fleet_table(payload) if fleet else _rate_table(payload))
    _print_failures(console, payload, fleet)
    if payload["floor_rule"]:
        console.print(f"rule: {payload['floor_rule']}")
    if fleet:
        console.print(
            "GPUs: the fewest meeting every SLO for each seed, min-max over seeds (disaggregated: "
            "prefill+decode GPUs and the prefill share); "
            "binds: the SLO the fleet one GPU smaller broke (keeping up (floor): "
            "the answer is the floor below which a fleet cannot keep up with the arrivals); "
            "TTFT/TPOT/TBT p99: the worst seed at its answer"
        )
        streams = {r["hardware"]: r["n_requests"] for r in payload["results"]}
        console.print("stream per seed: " + ", ".join(f"{h} {n} requests" for h, n in streams.items()))
        for h, p in payload["prices"].items():
            if h in streams:
                console.print(f"price {h}: ${p['price_per_hour_usd']:g}/GPU-hour ({p['source']})")
        if payload["prices"]:
            console.print("$/M out tok = $/h / (target rate x output tokens x 3600 s) x 1e6")
    for method, label in payload.get("validation_bands", {}).items():
        console.print(escape(f"simulator's validation band, {method}: {label}"))
    serving = payload.get("serving_validation_band")
    if serving is not None:
        engine = serving["engine"]
        console.print(escape(f"serving model's validation band, engine {engine}: {serving['label']}"))
    for note in payload["notes"]:
        console.print(f"[yellow]note:[/] {note}")
