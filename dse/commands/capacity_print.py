"""Print `dse capacity`'s answer: the question, the floor's rule, one row per (profile, method), the
decision per profile, the evidence and the notes. Never imports torch."""

from __future__ import annotations

from typing import Any

__all__ = ["print_answer", "accuracy_text"]


def _f(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _named(pick: dict) -> str:
    """'freekv B=2048 p=32 ...', or the method alone when it has no knobs ('-')."""
    return pick["method"] if pick["knobs"] == "-" else f"{pick['method']} {pick['knobs']}"


def accuracy_text(r: dict) -> str:
    if r["accuracy"] is None:
        return "not measured"
    text = f"{r['accuracy']:.2f}"
    if r["accuracy_low"] is not None:
        text += f" [{r['accuracy_low']:.2f},{r['accuracy_high']:.2f}]"
    return text + f" n={r['accuracy_n']}"


def _tps(r: dict) -> str:
    text = _f(r["tokens_per_s"], ",.0f")
    low, high = r["tokens_per_s_low"], r["tokens_per_s_high"]
    if low is not None and high is not None and high > low * 1.005:
        text += f" ({low:,.0f}-{high:,.0f})"
    return text


def print_answer(payload: dict) -> None:
    from rich.table import Table

    from dse.commands.sim_render import console as make_console

    q = payload["question"]
    console = make_console()
    floor = (f"accuracy floor {q['min_accuracy_ratio']:g} x dense" if q["min_accuracy_ratio"] is not None
             else "no accuracy floor (--min-accuracy-ratio): ranked by speed alone")
    console.print(
        f"[bold]{q['model']}[/], {q['input_tokens']} input + {q['output_tokens']} output tokens, per-token "
        f"{q['slo_stat']} latency <= {q['slo_ms']:g} ms, {floor}; ranked by {q['ranked_by']}, priced "
        f"{q['implementation']}"
    )
    if payload["floor_rule"]:
        console.print(f"rule: {payload['floor_rule']}")
    console.print(f"steps: {payload['step_sampling']}")
    priced = bool(payload["prices"])
    table = Table(title="per profile and method: the best knobs with evidence (accuracy measured; batch, "
                  "latency, tokens/s simulated)")
    cols = ["hardware", "method", "knobs", "accuracy", "dense", "floor", "batch", "p99 ms", "tokens/s"]
    cols += ["tok/s per $/h"] if priced else []
    cols += ["binds", "status"]
    for col in cols:
        table.add_column(col, justify="right" if col in ("batch", "p99 ms", "tokens/s", "tok/s per $/h")
                         else "left")
    for r in payload["rows"]:
        cells = [r["hardware"], r["method"] + (" (transplanted)" if r["transplant"] else ""), r["knobs"],
                 accuracy_text(r), _f(r["dense_accuracy_same_prompts"], ".2f"), r["floor_verdict"],
                 _f(r["batch"], "d"), _f(r["per_token_p99_ms"], ".1f"), _tps(r)]
        cells += [_f(r["tokens_per_s_per_usd_hour"], ",.0f")] if priced else []
        cells += [r["binds"] or "-", r["status"] + (f": {r['why']}" if r["why"] else "")]
        table.add_row(*cells)
    console.print(table)
    for d in payload["decisions"]:
        chosen, runner = d["chosen"], d["runner_up"]
        if chosen is None:
            console.print(f"[bold]{d['hardware']}[/]: no method meets the SLO and the floor (rows say why)")
            continue
        text = (f"[bold]{d['hardware']}[/]: run {_named(chosen)} at batch {chosen['batch']}: "
                f"{chosen['tokens_per_s']:,.0f} tokens/s (simulated)")
        if runner is not None:
            text += f"; runner-up {_named(runner)} ({runner['tokens_per_s']:,.0f} tokens/s)"
        console.print(text)
    console.print("tokens/s (a-b): the range over the demand's ends (a preset's published or stated range); "
                  "dense: dense attention's accuracy on the same prompts")
    console.print("[bold]how sure[/] (simulated rows):")
    for r in payload["rows"]:
        s = r.get("sureness")
        if s is None:
            continue
        other = {m: v for m, v in s["pricing"].items() if m != payload["question"]["implementation"]}
        parts = [f"priced {m}: batch {v['batch']}, {_f(v['tokens_per_s'], ',.0f')} tokens/s"
                 for m, v in other.items()]
        parts += [f"{h['knob']} x{h['low']['factor']:g}..x{h['high']['factor']:g}: "
                  f"{_f(h['low']['tokens_per_s'], ',.0f')}..{_f(h['high']['tokens_per_s'], ',.0f')} tokens/s"
                  for h in s["hardware"]]
        console.print(f"  {r['hardware']} {r['method']} ({r['status']}): " + "; ".join(parts))
    for method in dict.fromkeys(r["method"] for r in payload["rows"]):
        band = next(r["validation_band"] for r in payload["rows"] if r["method"] == method)
        console.print(f"  simulator vs published, {method}: {band}")
    for r in payload["rows"]:
        console.print(f"demand of {r['hardware']} {r['method']}: {r['demand']}")
    for e in payload["evidence"]:
        console.print(f"evidence: {e['method']} {e['knobs']}: {e['metric']} {_f(e['value'], '.3f')} "
                      f"(n={e['n']}, {e['paired_prompts']} per-prompt scores) from {e['source']}")
    for note in payload["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    console.print("binds: memory when the answer is the memory bound, else the SLO with the largest share of "
                  "the first batch over it (rule: sim/capacity.py)")
