"""Part `parity`: do the CUDA and CPU paths make the same decisions?

For each policy of the suite's --parity-methods (default FreeKV), the same random weights (drawn on the
CPU with one seed, then moved) run the fidelity task (teacher-forced: both devices see the same tokens
whatever they predict) on the CPU and on CUDA in float32. `compare_traces` then walks the two traces
step by step: corrections, selected pages and recalled (missed) pages per (sequence, step, layer, KV
head), plus the initial selection after prefill and the largest difference of the query similarity.
Decisions are causal: after the first differing selection the caches differ, so later recalls may differ
too; `first_divergence` says where it started. Writes DIR/parity/<method>/{cpu,cuda}/ (trace +
summary.json) and DIR/parity/parity.json (one entry per method).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_parts.common import Options, cuda_skip_reason, has_cuda, write_json

__all__ = ["run", "compare_traces", "ParitySetup"]

MAX_LISTED = 20  # mismatches listed in full (all are counted)


@dataclass(frozen=True)
class ParitySetup:
    model: str
    layers: int
    context_tokens: int
    decode_tokens: int
    knobs: dict[str, Any]  # the retrieval knobs
    tau: float  # FreeKV's correction threshold


# On a GPU machine: the Llama-3.1-8B shape cut to 4 layers (one dense) and FreeKV's paper knobs; the
# small setup is the quick one and the only one a 2-core CPU finishes in seconds.
FULL = ParitySetup(
    "llama-3.1-8b",
    4,
    4096,
    32,
    dict(page_size=32, budget_tokens=2048, sink_tokens=512, window_tokens=512),
    0.9,
)
SMALL = ParitySetup(
    "smollm2-135m",
    3,
    512,
    8,
    dict(page_size=16, budget_tokens=256, sink_tokens=32, window_tokens=32),
    0.9,
)


def _pages_differ(a: tuple, b: tuple) -> list[tuple[int, int]]:
    """(layer, head) pairs whose page id arrays differ."""
    return [
        (layer, head)
        for layer, (ra, rb) in enumerate(zip(a, b, strict=True))
        for head, (x, y) in enumerate(zip(ra, rb, strict=True))
        if not np.array_equal(x, y)
    ]


def compare_traces(a_dir: Path, b_dir: Path) -> dict[str, Any]:
    """Step-by-step comparison of two traces of the same run on two devices (see the module docstring)."""
    from traces import open_trace

    ra, rb = open_trace(a_dir), open_trace(b_dir)
    counts = {"steps": 0, "head_checks": 0, "corrected": 0, "selected": 0, "missed": 0, "initial_selected": 0}
    listed: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    sim_diff = 0.0

    def note(kind: str, seq: int, step: int, pairs: list[tuple[int, int]]) -> None:
        nonlocal first
        counts[kind] += len(pairs)
        if pairs and first is None:
            first = {"kind": kind, "sequence": seq, "step": step, "layer": pairs[0][0], "head": pairs[0][1]}
        for layer, head in pairs[: max(0, MAX_LISTED - len(listed))]:
            listed.append({"kind": kind, "sequence": seq, "step": step, "layer": layer, "head": head})

    for pa, pb in zip(ra.prefills(), rb.prefills(), strict=True):
        note("initial_selected", pa.sequence, -1, _pages_differ(pa.initial_selected, pb.initial_selected))
    n_a, n_b = ra.n_steps, rb.n_steps
    for sa, sb in zip(ra.steps(), rb.steps(), strict=False):
        counts["steps"] += 1
        counts["head_checks"] += int(sa.corrected.size)
        both = ~np.isnan(sa.similarity) & ~np.isnan(sb.similarity)
        if both.any():
            sim_diff = max(sim_diff, float(np.abs(sa.similarity[both] - sb.similarity[both]).max()))
        note("corrected", sa.sequence, sa.step, [tuple(x) for x in np.argwhere(sa.corrected != sb.corrected)])
        note("selected", sa.sequence, sa.step, _pages_differ(sa.selected, sb.selected))
        note("missed", sa.sequence, sa.step, _pages_differ(sa.missed, sb.missed))
    mismatches = sum(v for k, v in counts.items() if k not in ("steps", "head_checks"))
    return {
        "identical": mismatches == 0 and n_a == n_b,
        "steps_a": n_a,
        "steps_b": n_b,
        "counts": counts,
        "similarity_max_abs_diff": sim_diff,
        "first_divergence": first,
        "mismatches_listed": listed,
        "a": str(a_dir),
        "b": str(b_dir),
    }


def _trace(setup: ParitySetup, method: str, device: str, out: Path, seed: int) -> dict[str, Any]:
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec

    req = TraceRequest(
        model=setup.model,
        task=TaskSpec(
            "fidelity", context_tokens=setup.context_tokens, n_samples=1, decode_tokens=setup.decode_tokens
        ),
        runtime=RuntimeConfig(method=method, dense_layers=(0,), **setup.knobs,
                              knobs={"tau": setup.tau} if method == "freekv" else {}),
        out_dir=out,
        seed=seed,
        device=device,
        dtype="float32",
        overwrite=True,
        random_weights=seed,
        layers=setup.layers,
        random_init="cpu",
    )
    outcome = run_trace(req)
    return {
        "trace": str(outcome.trace_dir),
        "wall_s": outcome.summary["wall_s"],
        "correction_rate": outcome.summary.get("correction_rate"),
        "missed_pages_per_step": outcome.summary.get("missed_pages_per_step"),
    }


def _one_method(setup: ParitySetup, method: str, out: Path, seed: int) -> dict[str, Any]:
    """The CPU side, then (with CUDA) the CUDA side and their comparison, of one policy."""
    result: dict[str, Any] = {"cpu": _trace(setup, method, "cpu", out / "cpu", seed)}
    if not has_cuda():
        return result
    result["cuda"] = _trace(setup, method, "cuda", out / "cuda", seed)
    result["comparison"] = compare_traces(out / "cpu" / "trace", out / "cuda" / "trace")
    counts = result["comparison"]["counts"]
    result["summary"] = (
        f"identical: {result['comparison']['identical']}; mismatching corrections "
        f"{counts['corrected']}, selections {counts['selected']}, recalls {counts['missed']} "
        f"of {counts['head_checks']} head checks"
    )
    return result


def run(out: Path, opts: Options) -> dict:
    setup = SMALL if opts.quick or not has_cuda() else FULL
    result: dict[str, Any] = {"setup": setup.__dict__, "dtype": "float32", "seed": opts.seed, "methods": {}}
    for method in opts.parity_methods:
        print(f"   parity {method}", flush=True)
        try:
            result["methods"][method] = _one_method(setup, method, out / method, opts.seed)
        except Exception as exc:  # noqa: BLE001 - recorded for this method; the next one runs
            result["methods"][method] = {"error": f"{type(exc).__name__}: {exc}"}
        write_json(out / "parity.json", result)  # each method lands as it finishes
    failed = [m for m, r in result["methods"].items() if "error" in r]
    if not has_cuda():
        result.update(
            status="partial" if failed else "skipped",
            reason=f"{cuda_skip_reason()}: only the CPU side ran ({', '.join(opts.parity_methods)}); "
            f"nothing to compare it with" + (f"; failed on the CPU: {', '.join(failed)}" if failed else ""),
        )
    else:
        different = [m for m, r in result["methods"].items() if "comparison" in r
                     and not r["comparison"]["identical"]]
        result["summary"] = (f"{len(opts.parity_methods) - len(failed) - len(different)} identical, "
                             f"different: {different or 'none'}, failed: {failed or 'none'}")
        if failed:
            result["status"] = "partial"
    write_json(out / "parity.json", result)
    return result
