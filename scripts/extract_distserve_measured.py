"""Extract DistServe's measured per-request serving runs (OPT-13B, ShareGPT) into one small CSV.

    python scripts/extract_distserve_measured.py EXP_DIR [--out-dir benchmarks/data]

writes one CSV per backend: distserve_opt13b_sharegpt_measured_vllm.csv and
distserve_opt13b_sharegpt_measured_distserve.csv (columns FIELDS).

EXP_DIR holds the `.exp` files of LLMServe/DistServe at commit 20a1633
(simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/), e.g. written from a clone by

    P=simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt
    for f in $(git -C DistServe ls-tree --name-only 20a1633 $P/); do
        git -C DistServe show 20a1633:$f > EXP_DIR/$(basename $f); done

Each `.exp` file's first line is a Python literal: a list of dicts (prompt_len, output_len, issue_time,
first_token_time, complete_time, ttft_ms, tpot_ms, latency_ms) written by DistServe's benchmark client
(distserve/evaluation/2-benchmark-serving/structs.py `ReqResult`, `dump_req_result_list`, commit 36306b0);
the rest of the file is a printed summary, not read. It is parsed with `ast.literal_eval` (never `eval`).
Kept: the runs `vllm-{N}-{rate}.exp` (config `tp1`: vLLM on one GPU) and `distserve-c21d11-{N}-{rate}.exp`
(config `c21d11`: DistServe, prefill TP 2 + decode TP 1); the unprefixed `distserve-*` and the `c21d12-*`
runs are not (benchmarks/serving_measured.py says why). Requests are ordered by issue time (as the authors'
align_with_real.py orders them) and numbered from 0; issue times are made relative to the run's first
issue; values are rounded (issue 0.1 ms, TTFT 0.01 ms, TPOT 0.001 ms), far below the runs' own noise.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import sys
from pathlib import Path

FIELDS = ("backend", "config", "rate", "n", "request", "prompt_len", "output_len", "issue_time_s", "ttft_ms",
          "tpot_ms")
CSV_STEM = "distserve_opt13b_sharegpt_measured"
_NAME = re.compile(r"^(?P<prefix>vllm|distserve-c21d11)-(?P<n>\d+)-(?P<rate>\d+(?:\.\d+)?)\.exp$")
_CONFIG = {"vllm": ("vllm", "tp1"), "distserve-c21d11": ("distserve", "c21d11")}


def read_exp(path: Path) -> list[dict[str, float]]:
    """The request dicts on the first line of one `.exp` file."""
    with open(path) as f:
        first = f.readline().strip()
    reqs = ast.literal_eval(first)
    if not isinstance(reqs, list) or not all(isinstance(r, dict) for r in reqs):
        raise ValueError(f"{path}: the first line is not a list of request dicts")
    return reqs


def rows_of(path: Path) -> list[dict[str, object]]:
    m = _NAME.match(path.name)
    if m is None:
        return []
    backend, config = _CONFIG[m["prefix"]]
    reqs = sorted(read_exp(path), key=lambda r: r["issue_time"])
    if len(reqs) != int(m["n"]):
        raise ValueError(f"{path}: {len(reqs)} requests, the name says {m['n']}")
    t0 = reqs[0]["issue_time"]
    return [
        {"backend": backend, "config": config, "rate": m["rate"], "n": m["n"], "request": i,
         "prompt_len": int(r["prompt_len"]), "output_len": int(r["output_len"]),
         "issue_time_s": f"{r['issue_time'] - t0:.4f}", "ttft_ms": f"{r['ttft_ms']:.2f}",
         "tpot_ms": f"{r['tpot_ms']:.3f}"}
        for i, r in enumerate(reqs)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exp_dir", type=Path)
    parser.add_argument("--out-dir", type=Path,
                        default=Path(__file__).resolve().parent.parent / "benchmarks" / "data")
    args = parser.parse_args(argv)
    files = sorted(args.exp_dir.glob("*.exp")) if args.exp_dir.is_dir() else []
    kept = [p for p in files if _NAME.match(p.name)]
    if not kept:
        print(f"error: EXP_DIR {args.exp_dir}: no vllm-N-RATE.exp or distserve-c21d11-N-RATE.exp files; give "
              "the directory the DistServe .exp files were written to (see this script's docstring)",
              file=sys.stderr)
        return 2

    def order(p: Path) -> tuple[str, float, int]:
        m = _NAME.match(p.name)
        assert m is not None
        return (m["prefix"], float(m["rate"]), int(m["n"]))

    try:
        rows = [row for p in sorted(kept, key=order) for row in rows_of(p)]
    except (ValueError, SyntaxError, KeyError, TypeError) as exc:
        print(f"error: EXP_DIR {args.exp_dir}: a file is not a DistServe .exp result (first line: a Python "
              f"list of request dicts with prompt_len, output_len, issue_time, ttft_ms, tpot_ms): {exc}",
              file=sys.stderr)
        return 2
    for backend in sorted({str(r["backend"]) for r in rows}):
        out = args.out_dir / f"{CSV_STEM}_{backend}.csv"
        mine = [r for r in rows if r["backend"] == backend]
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows(mine)
        runs = len({(r["rate"], r["n"]) for r in mine})
        print(f"{len(mine)} requests of {runs} runs -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
