"""Part `parity`: do the CUDA and CPU paths make the same decisions?

The same random weights (drawn on the CPU with one seed, then moved) run the fidelity task
(teacher-forced: both devices see the same tokens whatever they predict) with FreeKV on the CPU and on
CUDA in float32. `compare_traces` then walks the two traces step by step: corrections, selected pages
and recalled (missed) pages per (sequence, step, layer, KV head), plus the initial selection after
prefill and the largest difference of the query similarity. Decisions are causal: after the first
differing selection the caches differ, so later recalls may differ too; `first_divergence` says where
it started. Writes DIR/parity/{cpu,cuda}/ (trace + summary.json) and DIR/parity/parity.json.
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


def _trace(setup: ParitySetup, device: str, out: Path, seed: int) -> dict[str, Any]:
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec

    req = TraceRequest(
        model=setup.model,
        task=TaskSpec(
            "fidelity", context_tokens=setup.context_tokens, n_samples=1, decode_tokens=setup.decode_tokens
        ),
        runtime=RuntimeConfig(method="freekv", dense_layers=(0,), **setup.knobs, knobs={"tau": setup.tau}),
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


def run(out: Path, opts: Options) -> dict:
    setup = SMALL if opts.quick or not has_cuda() else FULL
    result: dict[str, Any] = {
        "setup": setup.__dict__,
        "dtype": "float32",
        "seed": opts.seed,
        "cpu": _trace(setup, "cpu", out / "cpu", opts.seed),
    }
    write_json(out / "parity.json", result)  # the CPU side lands even if the CUDA side then fails
    if not has_cuda():
        result.update(
            status="skipped",
            reason=f"{cuda_skip_reason()}: only the CPU side ran "
            f"({result['cpu']['trace']}); nothing to compare it with",
        )
        write_json(out / "parity.json", result)
        return result
    result["cuda"] = _trace(setup, "cuda", out / "cuda", opts.seed)
    result["comparison"] = compare_traces(out / "cpu" / "trace", out / "cuda" / "trace")
    write_json(out / "parity.json", result)
    counts = result["comparison"]["counts"]
    result["summary"] = (
        f"identical: {result['comparison']['identical']}; mismatching corrections "
        f"{counts['corrected']}, selections {counts['selected']}, recalls {counts['missed']} "
        f"of {counts['head_checks']} head checks"
    )
    return result
