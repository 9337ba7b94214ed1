"""The measured methods table: every runtime policy of the catalogue at two budgets on a RULER-style
retrieval task, each cell paired with dense attention on the same prompts.

    python benchmarks/methods_table.py                              # every policy, budgets 128 and 256
    python benchmarks/methods_table.py --methods lazyeviction       # run only its cells, merge them in
    python benchmarks/methods_table.py --table-only                 # rebuild the table from the cache

Each cell (dense once, then method x budget) is one `run_trace` in this process (the model is loaded
once): task --task (niah_single) at --context tokens, --samples prompts (seed --seed: every cell sees the
same prompts, paired by prompt id), greedy, the first --decode-tokens generated tokens scored by RULER's
string_match_all; page --page, sink --sink, window --window, every other knob at the method's default.
A cell's results live in OUT/cells/<method>-<budget>/ (summary.json, trace/, cell.json with the settings
that made it; OUT defaults to benchmarks/results/methods_table_niah512, where the measured cells are
kept); a cell whose settings match is read back, not re-run, so `--methods X` adds or re-runs X only and
the table is rebuilt from every cached cell of the same settings.

Per cell: accuracy with its 95% Wilson interval; the paired difference to dense with its 95% paired
bootstrap interval; McNemar's exact p; resolved at 95% (yes/no); for unresolved cells the paired samples
that would resolve the observed difference at 80% power (Connor 1987; dse/accuracy/resolution.py). With
--sim, the simulated ms/token of the method replaying its own trace (`dse sim run`, as-published).
Writes OUT/table.md and OUT/table.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dse.accuracy.paired import compare_metric
from dse.accuracy.resolution import detectable_drop, resolve
from dse.accuracy.samples import scores
from traces.atomic_write import atomic_write_text
from traces.catalogue import DENSE, names

_SETTINGS = ("task", "context", "samples", "decode_tokens", "page", "sink", "window", "seed", "model",
             "batch_size")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in _SETTINGS}


def _cell_dir(args: argparse.Namespace, method: str, budget: int | None) -> Path:
    return args.out / "cells" / (method if budget is None else f"{method}-{budget}")


def _cached(cell: Path, settings: dict[str, Any]) -> dict | None:
    """The cell's summary.json when it was made with these settings, else None."""
    try:
        made = json.loads((cell / "cell.json").read_text())
        return json.loads((cell / "summary.json").read_text()) if made == settings else None
    except (OSError, ValueError):
        return None


def _run_cell(method: str, budget: int | None, args: argparse.Namespace) -> dict:
    """Run (or read back) one cell; its summary.json."""
    cell = _cell_dir(args, method, budget)
    found = _cached(cell, _settings(args))
    if found is not None:
        return found
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec

    shared = {"page_size": args.page, "sink_tokens": args.sink, "window_tokens": args.window}
    runtime = RuntimeConfig(method=method, **shared, **({} if budget is None else {"budget_tokens": budget}))
    task = TaskSpec(name=args.task, context_tokens=args.context, n_samples=args.samples,
                    decode_tokens=args.decode_tokens)
    t0 = time.perf_counter()
    outcome = run_trace(TraceRequest(model=args.model, task=task, runtime=runtime, out_dir=cell,
                                     seed=args.seed, device="cpu", overwrite=True,
                                     batch_size=args.batch_size))
    atomic_write_text(cell / "cell.json", json.dumps(_settings(args)) + "\n")
    print(f"{method} {budget or '-'}: {outcome.accuracy} in {time.perf_counter() - t0:.0f} s", flush=True)
    return outcome.summary


def _sim_ms(method: str, budget: int | None, args: argparse.Namespace) -> float | None:
    """Simulated mean ms/token of `method` replaying its own trace (cached in the cell as sim.json)."""
    cell = _cell_dir(args, method, budget)
    path = cell / "sim.json"
    sim_settings = {k: getattr(args, k) for k in ("target", "hardware", "input_tokens", "output_tokens",
                                                   "sim_budget", "sim_page", "sim_sink", "sim_window")}
    try:
        cached = json.loads(path.read_text())
        if cached.get("settings") == sim_settings:
            return cached["ms"]
    except (OSError, ValueError):
        pass
    cmd = [sys.executable, "-m", "dse.cli", "sim", "run", str(cell / "trace"), "--method", method,
           "--model", args.target, "--hardware", args.hardware, "--input-tokens", str(args.input_tokens),
           "--output-tokens", str(args.output_tokens), "--budget-tokens", str(args.sim_budget),
           "--page-size", str(args.sim_page), "--sink-tokens", str(args.sim_sink), "--window-tokens",
           str(args.sim_window), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"sim failed for {method} {budget}: {done.stderr[-500:]}", file=sys.stderr)
        return None
    result = json.loads(done.stdout)
    ms = None if result.get("oom") else float(result["per_token_latency_s"]["mean"]) * 1e3
    atomic_write_text(path, json.dumps({"settings": sim_settings, "ms": ms}) + "\n")
    return ms


def _metric_samples(summary: dict) -> tuple[str, list[dict]]:
    metric = next(iter(summary["accuracy_samples"]))
    return metric, summary["accuracy_samples"][metric]


def _row(method: str, budget: int | None, summary: dict, dense: dict, ms: float | None) -> dict:
    metric, mine = _metric_samples(summary)
    _, ref = _metric_samples(dense)
    ci = summary["accuracy_ci"][metric]
    row: dict[str, Any] = {"method": method, "budget": budget, "metric": metric,
                           "accuracy": summary["accuracy"][metric], "low": ci.get("low"),
                           "high": ci.get("high"), "n": ci.get("n"), "sim_ms_per_token": ms}
    if method == DENSE:
        return row
    c = compare_metric(metric, mine, ref)
    r = resolve(scores(mine), scores(ref), (c.diff_low, c.diff_high))
    row.update({"dense": c.mean_b, "pairs": c.n, "diff": c.diff, "diff_low": c.diff_low,
                "diff_high": c.diff_high, "mcnemar_p": c.mcnemar_p, "losses": c.b_wins, "wins": c.a_wins,
                "resolved": r.resolved, "pairs_needed": r.needed, "resolution": r.reason})
    return row


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _markdown(rows: list[dict], args: argparse.Namespace, seconds: float) -> str:
    drop = detectable_drop(args.samples)
    lines = [
        f"{args.task} at {args.context} tokens (prompt {args.context - args.decode_tokens} tokens), "
        f"{args.samples} prompts (seed {args.seed}), model {args.model}, greedy, first {args.decode_tokens} "
        f"generated tokens scored (string_match_all); page {args.page}, sink {args.sink}, window "
        f"{args.window}, other knobs at each method's defaults. Paired with dense on the same prompts: "
        f"difference with its 95% paired bootstrap interval, McNemar's exact p, resolved at 95%, and for "
        f"unresolved cells the pairs that would resolve the observed difference at 80% power (Connor "
        f"1987). With {args.samples} pairs the smallest drop McNemar's exact test can resolve is "
        f"{drop:.0%} (6 losses, no wins).",
        "",
        "| method | budget | accuracy [95% CI] | vs dense [95% CI] | McNemar p | resolved | pairs needed |"
        + (" sim ms/token |" if args.sim else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if args.sim else ""),
    ]
    for r in rows:
        acc = f"{r['accuracy']:.3f} [{_f(r['low'], '.2f')}, {_f(r['high'], '.2f')}]"
        sim = f" {_f(r['sim_ms_per_token'], '.2f')} |" if args.sim else ""
        if r["method"] == DENSE:
            lines.append(f"| dense | - | {acc} | (reference) | - | - | - |{sim}")
            continue
        diff = f"{r['diff']:+.3f} [{_f(r['diff_low'], '+.2f')}, {_f(r['diff_high'], '+.2f')}]"
        needed = "-" if r["resolved"] else ("no difference seen" if r["pairs_needed"] is None
                                             else f"{r['pairs_needed']:.0f}")
        lines.append(f"| {r['method']} | {r['budget']} | {acc} | {diff} | {_f(r['mcnemar_p'], '.3g')} | "
                     f"{'yes' if r['resolved'] else 'no'} | {needed} |{sim}")
    lines.append(f"\n({seconds:.0f} s for this invocation)")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(m for m in names(runtime=True) if m != DENSE),
                        help="methods to run now (default: every runtime policy of the catalogue)")
    parser.add_argument("--budgets", default="128,256", help="comma-separated budget_tokens")
    parser.add_argument("--task", default="niah_single")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, default=12,
                        help="generated tokens scored (RULER: 128; the 7-digit answer is in the first 12)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--sink", type=int, default=16)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--sim", action="store_true", help="add the simulated ms/token column")
    parser.add_argument("--target", default="llama-3.1-8b", help="simulated model shape")
    parser.add_argument("--hardware", default="a100-40g-pcie4")
    parser.add_argument("--input-tokens", type=int, default=32768)
    parser.add_argument("--output-tokens", type=int, default=512)
    parser.add_argument("--sim-budget", type=int, default=2048)
    parser.add_argument("--sim-page", type=int, default=32)
    parser.add_argument("--sim-sink", type=int, default=512)
    parser.add_argument("--sim-window", type=int, default=512)
    parser.add_argument("--table-only", action="store_true", help="run nothing: rebuild from cached cells")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/methods_table_niah512"))
    return parser


def _cached_cells(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    """Every cached cell of the current settings, in catalogue order then budget."""
    order = {m: i for i, m in enumerate(names())}
    found = []
    for cell in sorted((args.out / "cells").glob("*")):
        if _cached(cell, _settings(args)) is None:
            continue
        method, _, budget = cell.name.rpartition("-")
        if method and budget.isdigit():
            found.append((method, int(budget)))
        elif cell.name == DENSE:
            found.append((DENSE, None))
    # dense first (the reference), then catalogue order, then budget
    return sorted(found, key=lambda c: (c[0] != DENSE, order.get(c[0], len(order)), c[1] or 0))


def main() -> None:
    args = _parser().parse_args()
    methods = [m for m in args.methods.split(",") if m and m != DENSE]
    budgets = [int(b) for b in args.budgets.split(",") if b]
    unknown = [m for m in methods if m not in names(runtime=True)]
    if unknown:
        print(f"--methods: {', '.join(unknown)} has no runtime policy; valid: "
              f"{', '.join(names(runtime=True))}", file=sys.stderr)
        sys.exit(2)
    started = time.perf_counter()
    if not args.table_only:
        _run_cell(DENSE, None, args)
        for budget in budgets:  # every method at the first budget first: a cut-short run covers them all
            for method in methods:
                _run_cell(method, budget, args)
    cells = _cached_cells(args)
    if (DENSE, None) not in cells:
        print(f"no dense cell under {args.out}/cells for these settings: run without --table-only",
              file=sys.stderr)
        sys.exit(2)
    dense = _cached(_cell_dir(args, DENSE, None), _settings(args))
    rows = []
    for method, budget in cells:
        summary = _cached(_cell_dir(args, method, budget), _settings(args))
        ms = _sim_ms(method, budget, args) if args.sim else None
        rows.append(_row(method, budget, summary, dense, ms))
    text = _markdown(rows, args, time.perf_counter() - started)
    print(text)
    atomic_write_text(args.out / "table.md", text + "\n")
    atomic_write_text(args.out / "table.json", json.dumps(
        {"settings": _settings(args), "rows": rows}, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
