"""The multi-context methods on rag_facts with the default model: accuracy and fidelity against joint
prefill, paired against full and no recompute.

    python benchmarks/rag_table.py                                  # 24 prompts, 1024 tokens, 4 documents
    python benchmarks/rag_table.py --samples 8 --context-tokens 768 --out runs/rag-table
    python benchmarks/rag_table.py --only samkv,"samkv block_tokens=16" --out runs/rag-table  # rerun two

With --only, the other configurations' rows and per-prompt scores come from OUT/table.json of an earlier
run with the same task settings (refused when it holds other settings; with no OUT/table.json only the
--only configurations run), so the pairing still uses the same prompts.

One process: the model is loaded once, dense attention's answers on the joined prompts (the fidelity
reference) computed once, then each configuration runs the same prompts through PolicyRunner (the
runtime `dse trace --task rag_facts` uses, untraced here). Per configuration: the answer score
(string match, Wilson interval), top-1 agreement and KL(dense || method) over the dense answer's tokens
(bootstrap intervals); paired against rag-no-recompute and rag-full-recompute: the mean score difference
with a 95% paired bootstrap interval and McNemar's exact p, and the mean top-1 difference with its
interval. The kept (sequence ratio) and recomputed shares come from the policy's own prefill decisions.
Writes OUT/table.md and OUT/table.json after every configuration (a partial run keeps what finished).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dse.accuracy.floor import mcnemar_exact
from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies import make_policy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model
from traces.atomic_write import atomic_write_text

CONFIGS = (("rag-no-recompute", {}), ("rag-full-recompute", {}), ("cacheblend", {}), ("epic", {}),
           ("samkv", {"block_tokens": 16}), ("samkv", {}))


class _Counting(PolicyRunner):
    """PolicyRunner that keeps the multi-context records of the prefills it ran (no trace written)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.records: list = []

    def _recorder(self, b: int):  # noqa: ANN202
        self.n_sequences += b
        records = self.records

        class _Keep:
            attention_mass: list = []

            def on_prefill(self, decisions, prompt_tokens, timings_s) -> None:  # noqa: ANN001
                records.extend(decisions.multi_context or [])

            def on_step(self, decisions, context_tokens, timings_s) -> None:  # noqa: ANN001
                return

        return _Keep()


def _paired(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float, float]:
    from scipy.stats import bootstrap

    d = x - y
    if np.all(d == d[0]):
        return float(d.mean()), float(d[0]), float(d[0])
    res = bootstrap((d,), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(seed))
    return float(d.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)


def _label(method: str, knobs: dict) -> str:
    return method + "".join(f" {k}={v}" for k, v in knobs.items())


def _table(rows: list[dict], spec: TaskSpec) -> str:
    lines = [f"rag_facts, SmolLM2-135M, {spec.context_tokens} tokens, {spec.params.get('documents', 4)} "
             f"documents, {spec.n_samples} prompts, {spec.decode_tokens} decoded tokens (CPU, float32)", "",
             "| method | score | top-1 vs joint | KL vs joint | kept | recomputed | score - no-recompute "
             "(McNemar p) | score - full (McNemar p) | top-1 - no-recompute |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def diff(name: str, key: str, r: dict = r) -> str:
            d = r.get(name)
            if d is None:
                return "-"
            return f"{d[key][0]:+.2f} [{d[key][1]:+.2f}, {d[key][2]:+.2f}]" + (
                f" (p={d['p']:.3g})" if key == "score" else "")
        lines.append(
            f"| {r['label']} | {r['score'][0]:.2f} [{r['score'][1]:.2f}, {r['score'][2]:.2f}] "
            f"| {r['top1'][0]:.3f} [{r['top1'][1]:.3f}, {r['top1'][2]:.3f}] "
            f"| {r['kl'][0]:.3f} [{r['kl'][1]:.3f}, {r['kl'][2]:.3f}] | {r['kept']:.2f} "
            f"| {r['recomputed']:.3f} "
            f"| {diff('vs_none', 'score')} | {diff('vs_full', 'score')} | {diff('vs_none', 'top1')} |")
    return "\n".join(lines) + "\n"


def add_rag_facts_arguments(ap: argparse.ArgumentParser, *, samples: int, context_tokens: int,
                            decode_tokens: int) -> None:
    """The rag_facts task flags (--samples, --context-tokens, --decode-tokens, --documents, --seed) with
    these defaults: the scripts that take them build the same prompts from the same values."""
    ap.add_argument("--samples", type=int, default=samples)
    ap.add_argument("--context-tokens", type=int, default=context_tokens)
    ap.add_argument("--decode-tokens", type=int, default=decode_tokens)
    ap.add_argument("--documents", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)


def rag_facts_spec(args: argparse.Namespace) -> tuple[TaskSpec, Any]:
    """The checked rag_facts spec of the flags of `add_rag_facts_arguments`, and the task."""
    spec = TaskSpec("rag_facts", args.context_tokens, args.samples, args.decode_tokens,
                    {"documents": args.documents})
    task = get_task("rag_facts")
    task.check(spec)
    return spec, task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rag_facts_arguments(ap, samples=24, context_tokens=1024, decode_tokens=10)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("runs/rag-table"))
    ap.add_argument("--only", default=None,
                    help="comma-separated configuration labels to run (e.g. samkv,'samkv block_tokens=16'); "
                         "the rest are read from OUT/table.json")
    args = ap.parse_args()
    device = torch.device("cpu")
    loaded = load_model("smollm2-135m", None, device, torch.float32)
    spec, task = rag_facts_spec(args)
    rows: list[dict] = []
    per_prompt: dict[str, dict[str, np.ndarray]] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    labels = [_label(m, k) for m, k in CONFIGS]
    only = None if args.only is None else [x.strip() for x in args.only.split(",") if x.strip()]
    earlier: dict = {}
    if only is not None:
        unknown = sorted(set(only) - set(labels))
        if unknown:
            raise SystemExit(f"--only: unknown configuration {unknown}; valid: {labels}")
        path = args.out / "table.json"
        earlier = json.loads(path.read_text()) if path.exists() else {"spec": spec.to_dict(), "rows": []}
        if earlier.get("spec") != spec.to_dict():
            raise SystemExit(f"--only: {path} is from a run with other task settings "
                             f"({earlier.get('spec')}); give an OUT of a run with {spec.to_dict()} or a "
                             "fresh OUT")
    for method, knobs in CONFIGS:
        label = _label(method, knobs)
        if only is not None and label not in only:
            kept = [r for r in earlier["rows"] if r["label"] == label]
            if kept:
                rows.append(kept[0])
                per_prompt[label] = {m: np.array(v) for m, v in earlier["per_prompt"][label].items()}
            continue
        started = time.perf_counter()
        runner = _Counting(loaded, make_policy(RuntimeConfig(method=method, knobs=knobs)), None,
                           OpTimer(device), batch_size=args.batch_size)
        result = task.run(spec, runner, args.seed)
        scores = {m.split("_")[-1]: np.array([s.score for s in e.samples]) for m, e in result.items()}
        per_prompt[label] = scores
        mc = runner.records
        row = {"label": label, "method": method, "knobs": knobs, "wall_s": time.perf_counter() - started,
               "kept": float(np.mean([r.sequence_ratio for r in mc])),
               "recomputed": float(np.mean([r.recompute_ratios.mean() for r in mc])),
               **{m.split("_")[-1]: (e.value, e.low, e.high) for m, e in result.items()}}
        for name, ref in (("vs_none", "rag-no-recompute"), ("vs_full", "rag-full-recompute")):
            if ref in per_prompt and ref != label:
                base = per_prompt[ref]
                p, wins, losses = mcnemar_exact(scores["score"], base["score"])
                row[name] = {"score": _paired(scores["score"], base["score"], args.seed),
                             "top1": _paired(scores["top1"], base["top1"], args.seed),
                             "p": p, "wins": wins, "losses": losses}
        rows.append(row)
        print(f"{label}: {row['wall_s']:.0f} s", flush=True)
        atomic_write_text(args.out / "table.md", _table(rows, spec))
        atomic_write_text(args.out / "table.json", json.dumps(
            {"spec": spec.to_dict(), "rows": rows,
             "per_prompt": {k: {m: v.tolist() for m, v in s.items()} for k, s in per_prompt.items()}},
            indent=1) + "\n")
    print(_table(rows, spec))


if __name__ == "__main__":
    main()
