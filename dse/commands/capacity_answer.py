"""`dse capacity`'s answer: gather accuracy evidence, price every candidate, decide, write and print.

Rows are one per (profile, method): the candidate shown (chosen, runner-up, lost with why, undecided,
excluded) with its measured accuracy (interval, n, dense's on the same prompts, source), the floor's
verdict, and its simulated batch, latency and tokens/s (with the range over the demand's ends), memory
and what binds. Every number says whether it was measured or simulated. Never imports torch (a
measurement imports it).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from dse.accuracy.decide import Decision, MethodRow, Option, decide
from dse.accuracy.evidence import knob_text
from dse.commands.capacity_evidence import accuracy_fields, finite_or_none

__all__ = ["run_capacity", "CSV_COLUMNS"]

CSV_COLUMNS = (
    "hardware", "method", "status", "why", "knobs", "accuracy_metric", "accuracy", "accuracy_low",
    "accuracy_high", "accuracy_n", "dense_accuracy_same_prompts", "floor_verdict", "accuracy_source",
    "accuracy_label", "batch", "per_token_mean_ms", "per_token_p99_ms", "tokens_per_s", "tokens_per_s_low",
    "tokens_per_s_high", "tokens_per_s_per_usd_hour", "gpu_gib", "host_gib", "max_batch_memory", "binds",
    "latency_label", "demand", "transplant", "transplanted_method",
)


def run_capacity(base: Any, *, demand_given: bool, slo_ms: float, slo_stat: str, price: dict,
                 accuracy_from: tuple[str, ...], measure: str | None, measure_model: str | None,
                 metric: str | None, ratio: float | None, budgets: str | None, csv_path: Path | None,
                 json_path: Path | None) -> None:
    from dse.accuracy.floor import rule_text
    from dse.commands.capacity_evidence import candidates, evidence_options, gather_evidence, parse_budgets

    budget_list = parse_budgets(budgets)
    evidence, notes = gather_evidence(base, accuracy_from, measure, measure_model, metric, budget_list)
    dense = [e for e in evidence if e.method == "dense"]
    if ratio is not None and evidence and not dense:
        from dse.errors import DseError

        raise DseError("--min-accuracy-ratio needs dense attention's accuracy on the same prompts: add a "
                       "dense run to --accuracy-from (e.g. `dse trace --method dense` with the same task "
                       "and seed) or use --measure")
    cands = candidates(base.methods, evidence, dict(base.knobs))
    options, replay_notes = evidence_options(base, cands, dense, ratio, slo_ms / 1e3, slo_stat, price,
                                             fixed_demand=demand_given)
    decisions = decide(options, per_dollar=bool(price))
    payload = _payload(base, decisions, slo_ms, slo_stat, price, ratio, evidence,
                       notes + replay_notes, rule_text(ratio) if ratio is not None else None)
    from dse.commands.capacity_sureness import add_sureness

    add_sureness(payload["rows"], decisions, base.implementations[0], slo_ms / 1e3, slo_stat, base.seed)
    _write(payload, json_path, csv_path)
    from dse.commands.capacity_print import print_answer

    print_answer(payload)


_CAPACITY_KEYS = ("batch", "per_token_mean_ms", "per_token_p99_ms", "tokens_per_s", "gpu_gib", "host_gib",
                  "max_batch_memory", "memory_limit", "binds", "step_sampling")


def _row(d: Decision, row: MethodRow) -> dict[str, Any]:
    o: Option = row.option
    ev, v = o.evidence, o.verdict
    ref = o.extra.get("dense_evidence")
    tps = [x.get("tokens_per_s") for x in (o.capacity, *o.ends.values()) if x.get("tokens_per_s")]
    hourly = o.price_per_hour_usd
    cap = o.capacity
    per_usd = cap["tokens_per_s"] / hourly if hourly and cap.get("tokens_per_s") else None
    return {
        "hardware": d.hardware, "method": o.method, "status": row.status, "why": row.why,
        **accuracy_fields(o.method, o.knobs, ev, v, ref),
        "runner_up_knobs": knob_text(o.method, row.runner_up.knobs) if row.runner_up else None,
        "other_knob_settings": row.alternatives,
        **{k: cap.get(k) for k in _CAPACITY_KEYS},
        "tokens_per_s_low": min(tps) if tps else None, "tokens_per_s_high": max(tps) if tps else None,
        "demand_ends": {k: {"batch": x.get("batch"), "tokens_per_s": x.get("tokens_per_s")}
                        for k, x in o.ends.items()},
        "tokens_per_s_per_usd_hour": per_usd, "demand": o.demand, "transplant": o.transplant,
        "transplanted_method": o.transplanted_method,
    }


def _payload(base: Any, decisions: list[Decision], slo_ms: float, slo_stat: str, price: dict,
             ratio: float | None, evidence: list, notes: list[str], rule: str | None) -> dict[str, Any]:
    rows = [_row(d, r) for d in decisions for r in d.rows]
    sampling = next((r["step_sampling"] for r in rows if r.get("step_sampling")), "")
    return {
        "question": {"model": base.model, "hardware": list(base.hardware), "methods": list(base.methods),
                     "input_tokens": base.input_tokens, "output_tokens": base.output_tokens, "slo_ms": slo_ms,
                     "slo_stat": slo_stat, "implementation": base.implementations[0],
                     "min_accuracy_ratio": ratio, "transplant_method": base.transplant_method,
                     "gpu_memory_utilization": base.gpu_memory_utilization,
                     "ranked_by": "tokens/s per $/h" if price else "tokens/s"},
        "floor_rule": rule,
        "decisions": [{"hardware": d.hardware,
                       "chosen": None if d.winner is None else _pick(d.winner),
                       "runner_up": None if d.runner_up is None else _pick(d.runner_up)} for d in decisions],
        "rows": rows,
        "evidence": [{"method": e.method, "knobs": knob_text(e.method, e.planned), "metric": e.metric,
                      "value": finite_or_none(e.value), "n": e.n, "paired_prompts": len(e.scores),
                      "source": e.source, "model": e.measured_model} for e in evidence],
        "step_sampling": sampling, "binds_rule": "sim/capacity.py docstring", "prices": price,
        "notes": notes,
    }


def _pick(row: MethodRow) -> dict[str, Any]:
    o = row.option
    return {"method": o.method, "knobs": knob_text(o.method, o.knobs), "batch": o.capacity.get("batch"),
            "tokens_per_s": o.capacity.get("tokens_per_s")}


def _write(payload: dict, json_path: Path | None, csv_path: Path | None) -> None:
    from dse.paths import write_text

    if json_path is not None:
        write_text(json_path, json.dumps(payload, indent=2, default=str), "--json")
    if csv_path is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(payload["rows"])
        write_text(csv_path, buf.getvalue(), "--csv")
