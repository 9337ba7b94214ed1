"""Every runtime policy on the default model: passkey and fidelity at two budgets against dense attention,
and the simulated latency of each method's own trace on one hardware profile.

    python benchmarks/methods_table.py                       # all policies, budgets 128 and 512 (~25 min CPU)
    python benchmarks/methods_table.py --methods freekv,h2o --budgets 128 --out runs/methods-table

For each method and budget it runs, as a user would (one subprocess per run):
  dse trace --method M --task passkey  --filler natural --context-tokens C --budget-tokens B ...
  dse trace --method M --task fidelity --context-tokens C --decode-tokens D --budget-tokens B ...
  dse sim run OUT/M-B-passkey/trace --method M --model TARGET --hardware H --input-tokens I ...
Dense attention (`--method dense`) runs once per task as the reference. The simulated latency replays the
method's own passkey trace (its own demand, with the simulator model of the same name) on TARGET's shape
(a model transplant, labelled by `dse sim`) at the FreeKV paper's baseline setting (budget 2048, page 32,
layer 0 dense) unless --sim-budget/--sim-page say otherwise; methods without a simulator model show "-".
Prints a markdown table and writes OUT/table.md and OUT/table.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from traces.atomic_write import atomic_write_text
from traces.catalogue import names

_DSE = [sys.executable, "-m", "dse.cli"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"FAILED ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}", file=sys.stderr)
    return done


def _trace(method: str, task: str, budget: int | None, args: argparse.Namespace, out: Path) -> dict | None:
    """Run `dse trace`; the run's summary.json (accuracy, wall time) or None if it failed."""
    cmd = [*_DSE, "trace", "--method", method, "--task", task, "--context-tokens", str(args.context),
           "--samples", str(args.samples), "--page-size", str(args.page), "--sink-tokens", str(args.sink),
           "--window-tokens", str(args.window), "--out", str(out), "--overwrite"]
    if budget is not None:
        cmd += ["--budget-tokens", str(budget)]
    if task == "passkey":
        cmd += ["--filler", "natural"]
    else:
        cmd += ["--decode-tokens", str(args.decode_tokens)]
    if _run(cmd).returncode != 0:
        return None
    return json.loads((out / "summary.json").read_text())


def _sim(method: str, trace: Path, args: argparse.Namespace) -> float | None:
    """Simulated mean per-token latency (s) of `method` replaying its own trace, or None."""
    cmd = [*_DSE, "sim", "run", str(trace / "trace"), "--method", method, "--model", args.target,
           "--hardware", args.hardware, "--input-tokens", str(args.input_tokens), "--output-tokens",
           str(args.output_tokens), "--budget-tokens", str(args.sim_budget), "--page-size",
           str(args.sim_page), "--sink-tokens", str(args.sim_sink), "--window-tokens", str(args.sim_window),
           "--json"]
    done = _run(cmd)
    if done.returncode != 0:
        return None
    result = json.loads(done.stdout)
    return None if result.get("oom") else float(result["per_token_latency_s"]["mean"])


def _metric(summary: dict | None, key: str) -> float | None:
    return None if summary is None else summary["accuracy"].get(key)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(m for m in names(runtime=True) if m != "dense"))
    parser.add_argument("--budgets", default="128,512", help="comma-separated budget_tokens")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--decode-tokens", type=int, default=32, help="fidelity decode tokens")
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--sink", type=int, default=16)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--target", default="llama-3.1-8b", help="simulated model shape")
    parser.add_argument("--hardware", default="a100-40g-pcie4")
    parser.add_argument("--input-tokens", type=int, default=32768)
    parser.add_argument("--output-tokens", type=int, default=512)
    parser.add_argument("--sim-budget", type=int, default=2048)
    parser.add_argument("--sim-page", type=int, default=32)
    parser.add_argument("--sim-sink", type=int, default=512)
    parser.add_argument("--sim-window", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path("runs/methods-table"))
    return parser


def _dense_row(args: argparse.Namespace) -> dict:
    """Dense attention, once per task: the reference row."""
    tasks = ("passkey", "fidelity")
    dense = {task: _trace("dense", task, None, args, args.out / f"dense-{task}") for task in tasks}
    row = {"method": "dense", "budget": "-",
           "passkey": _metric(dense["passkey"], "passkey_accuracy"),
           "top1_agreement": _metric(dense["fidelity"], "top1_agreement"),
           "mean_kl": _metric(dense["fidelity"], "mean_kl"),
           "latency_ms": None}
    dense_latency = _sim("dense", args.out / "dense-passkey", args)
    row["latency_ms"] = None if dense_latency is None else dense_latency * 1e3
    return row


def _method_row(method: str, budget: int, args: argparse.Namespace) -> dict:
    """One method at one budget: passkey and fidelity runs, and the simulated latency of its passkey trace."""
    runs = {task: _trace(method, task, budget, args, args.out / f"{method}-{budget}-{task}")
            for task in ("passkey", "fidelity")}
    latency = _sim(method, args.out / f"{method}-{budget}-passkey", args) if runs["passkey"] else None
    return {"method": method, "budget": budget,
            "passkey": _metric(runs["passkey"], "passkey_accuracy"),
            "top1_agreement": _metric(runs["fidelity"], "top1_agreement"),
            "mean_kl": _metric(runs["fidelity"], "mean_kl"),
            "latency_ms": None if latency is None else latency * 1e3}


def _cell(v: object, fmt: str) -> str:
    return "-" if v is None else format(v, fmt) if isinstance(v, float) else str(v)


def _markdown(rows: list[dict], args: argparse.Namespace, seconds: float) -> str:
    lines = [
        f"passkey: natural filler, {args.context} tokens, {args.samples} samples; fidelity: {args.context} "
        f"tokens, {args.decode_tokens} teacher-forced tokens; page {args.page}, sink {args.sink}, window "
        f"{args.window}; latency: own passkey trace replayed on {args.target} at {args.input_tokens} in / "
        f"{args.output_tokens} out, batch 1, budget {args.sim_budget}, page {args.sim_page}, "
        f"{args.hardware}, as-published (simulated)",
        "",
        "| method | budget | passkey | top-1 agreement | mean KL (nats) | simulated ms/token |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['budget']} | {_cell(r['passkey'], '.3f')} | "
                     f"{_cell(r['top1_agreement'], '.3f')} | {_cell(r['mean_kl'], '.4f')} | "
                     f"{_cell(r['latency_ms'], '.2f')} |")
    lines.append(f"\n({seconds:.0f} s)")
    return "\n".join(lines)


def main() -> None:
    args = _parser().parse_args()
    methods = [m for m in args.methods.split(",") if m]
    budgets = [int(b) for b in args.budgets.split(",")]
    started = time.perf_counter()
    rows = [_dense_row(args)]
    for method in methods:
        for budget in budgets:
            rows.append(_method_row(method, budget, args))
            print(json.dumps(rows[-1]), flush=True)
    text = _markdown(rows, args, time.perf_counter() - started)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "table.md", text + "\n")
    atomic_write_text(args.out / "table.json", json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
