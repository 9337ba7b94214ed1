"""Random but realistic trace records for the traces tests (also run by the kill-test subprocess).

Every generator takes its numpy Generator explicitly, so the same seed gives the same records in any
process.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from traces import ModelSpec, PrefillRecord, RunMetadata, StepRecord, TraceWriter, get_model

MOVEMENTS = ("none", "freekv", "random")  # how StepStream fills fetched/evicted/refactorised
TIMING_NAMES = ("qkv", "correction_check", "select", "recall_sync", "attention", "ffn", "step_total")


def tiny_model(n_layers: int = 4, n_kv_heads: int = 2) -> ModelSpec:
    """A small made-up model spec (not in the registry) so tests stay fast."""
    return replace(
        get_model("smollm2-135m"), name=f"tiny-{n_layers}x{n_kv_heads}", n_layers=n_layers,
        n_kv_heads=n_kv_heads, n_qo_heads=3 * n_kv_heads, source="made up for the traces tests",
    )


def make_meta(model: ModelSpec, *, dense_layers: tuple[int, ...] = (0,), tau: float = 0.9,
              page_size: int = 32, budget_tokens: int = 2048, clock: str = "wall") -> RunMetadata:
    return RunMetadata(
        model=model,
        runtime={"method": "freekv", "page_size": page_size, "budget_tokens": budget_tokens,
                 "sink_tokens": 512, "window_tokens": 512, "tau": tau, "dense_layers": list(dense_layers),
                 "dtype": "float32", "batch_size": 2},
        task={"name": "passkey", "context_tokens": 4096, "n_samples": 2},
        seeds={"task": 0, "sampling": 0},
        device="cpu",
        library_versions={"numpy": np.__version__},
        timing_clock=clock,  # type: ignore[arg-type]
        created_utc="2026-11-22T00:00:00+00:00",
    )


def _pages(rng: np.random.Generator, n_pages: int, k: int) -> np.ndarray:
    return np.sort(rng.choice(n_pages, size=min(k, n_pages), replace=False)).astype(np.int32)


def random_prefill(rng: np.random.Generator, model: ModelSpec, sequence: int, prompt_tokens: int,
                   dense_layers: tuple[int, ...], n_selected: int, page_size: int = 32) -> PrefillRecord:
    n_pages = prompt_tokens // page_size
    empty = np.zeros(0, np.int32)
    sel = tuple(
        tuple(empty if layer in dense_layers else _pages(rng, n_pages, n_selected)
              for _ in range(model.n_kv_heads))
        for layer in range(model.n_layers)
    )
    return PrefillRecord(sequence, prompt_tokens, sel, {"prefill_total": float(rng.uniform(0.1, 1.0))})


class StepStream:
    """Successive steps of one sequence: each head's selection changes a few pages per step."""

    def __init__(self, model: ModelSpec, sequence: int, prompt_tokens: int, dense_layers: tuple[int, ...],
                 n_selected: int, page_size: int = 32, churn: int = 3, with_mass: bool = False,
                 missed_equals_added: bool = False, movement: str = "none") -> None:
        self.model, self.sequence, self.context = model, sequence, prompt_tokens
        self.dense, self.n_selected, self.page_size = dense_layers, n_selected, page_size
        self.churn, self.with_mass, self.step = churn, with_mass, 0
        self.missed_equals_added = missed_equals_added  # else: added, a random subset, or none
        if movement not in MOVEMENTS:
            raise ValueError(f"movement must be one of {MOVEMENTS}, got {movement!r}")
        self.movement = movement
        self.current: list[list[np.ndarray]] | None = None

    def next(self, rng: np.random.Generator) -> StepRecord:
        model, shape = self.model, (self.model.n_layers, self.model.n_kv_heads)
        self.context += 1
        n_pages = self.context // self.page_size
        empty = np.zeros(0, np.int32)
        selected, missed = [], []
        for layer in range(model.n_layers):
            sel_l, mis_l = [], []
            for h in range(model.n_kv_heads):
                if layer in self.dense:
                    sel_l.append(empty)
                    mis_l.append(empty)
                    continue
                prev = self.current[layer][h] if self.current is not None else empty
                if prev.size == 0:
                    sel = _pages(rng, n_pages, self.n_selected)
                    added = sel
                else:
                    k = int(rng.integers(0, self.churn + 1))
                    keep = np.sort(rng.choice(prev, size=prev.size - k, replace=False))
                    pool = np.setdiff1d(np.arange(n_pages), prev)
                    new = rng.choice(pool, size=min(k, pool.size), replace=False)
                    sel = np.union1d(keep, new).astype(np.int32)
                    added = np.setdiff1d(sel, prev)
                mode = 0 if self.missed_equals_added else rng.integers(0, 3)
                if mode == 0:
                    mis = added.astype(np.int32)
                elif mode == 1:
                    mis = np.sort(rng.choice(sel, size=int(rng.integers(0, sel.size + 1)), replace=False))
                else:
                    mis = empty
                sel_l.append(sel.astype(np.int32))
                mis_l.append(mis.astype(np.int32))
            selected.append(sel_l)
            missed.append(mis_l)
        self.current = selected
        similarity = rng.uniform(0.6, 1.0, shape).astype(np.float32)
        corrected = similarity < 0.9
        attended = np.full(shape, 1024 + self.n_selected * self.page_size, np.int32)
        for layer in self.dense:
            similarity[layer] = np.nan
            corrected[layer] = False
            attended[layer] = self.context
        names = rng.choice(TIMING_NAMES, size=int(rng.integers(1, len(TIMING_NAMES) + 1)), replace=False)
        rec = StepRecord(
            sequence=self.sequence, step=self.step, context_tokens=self.context, similarity=similarity,
            corrected=corrected, selected=tuple(tuple(x) for x in selected),
            missed=tuple(tuple(x) for x in missed), attended_tokens=attended,
            timings_s={str(n): float(rng.exponential(1e-3)) for n in names},
            attention_mass=rng.uniform(0.5, 1.0, shape).astype(np.float32) if self.with_mass else None,
        )
        self.step += 1
        return replace(rec, **self._moved(rng, rec))

    def _moved(self, rng: np.random.Generator, rec: StepRecord) -> dict[str, np.ndarray | None]:
        """The movement fields: none (all None), freekv (what the runtime's recorder writes for FreeKV:
        missed pages x page size, nothing evicted or rebuilt), random (any values, each field None with
        probability 1/4)."""
        if self.movement == "none":
            return {}
        shape = rec.similarity.shape
        if self.movement == "freekv":
            return {"fetched_tokens": (rec.missed_counts() * self.page_size).astype(np.int32),
                    "evicted_tokens": np.zeros(shape, np.int32), "refactorised": np.zeros(shape, bool)}
        fields = {
            "fetched_tokens": rng.integers(0, 5000, shape).astype(np.int32),
            "evicted_tokens": np.where(rng.random(shape) < 0.3, rng.integers(0, 1 << 31, shape),
                                       rng.integers(0, 3, shape)).astype(np.int32),
            "refactorised": rng.random(shape) < 0.2,
        }
        return {k: (None if rng.random() < 0.25 else v) for k, v in fields.items()}


def random_run(seed: int, model: ModelSpec, *, n_sequences: int = 3, n_steps: int = 6,
               dense_layers: tuple[int, ...] = (0,), n_selected: int = 8, with_mass: bool = False,
               prompt_tokens: int = 2048, movement: str = "none") -> list[PrefillRecord | StepRecord]:
    """Prefills of every sequence, then their steps interleaved (step-major, as a batch decodes)."""
    rng = np.random.default_rng(seed)
    records: list[PrefillRecord | StepRecord] = [
        random_prefill(rng, model, s, prompt_tokens + 64 * s, dense_layers, n_selected)
        for s in range(n_sequences)
    ]
    streams = [StepStream(model, s, prompt_tokens + 64 * s, dense_layers, n_selected, with_mass=with_mass,
                          movement=movement) for s in range(n_sequences)]
    for _ in range(n_steps):
        records += [stream.next(rng) for stream in streams]
    return records


def write_trace(path: Path, meta: RunMetadata, records: list[PrefillRecord | StepRecord], *,
                close: bool = True, **writer_options: object) -> Path:
    """Write `records` in order; close=False leaves the trace without its END frame (a cut-short run)."""
    writer = TraceWriter.create(path, meta, **writer_options)  # type: ignore[arg-type]
    for rec in records:
        if isinstance(rec, PrefillRecord):
            writer.append_prefill(rec)
        else:
            writer.append_step(rec)
    if close:
        writer.close()
    else:
        writer.abort()
    return path


def assert_identical(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert type(a) is type(b) and a.identical(b), f"record {i} differs: {a} != {b}"
