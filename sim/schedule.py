"""The aggregated engine: the semantics of sim/methods/base.py as a compiled max-plus recurrence.

Each operation is one interval per layer-step. A Kernel lasts its seconds; a Transfer's copy pipeline is
reduced to closed forms (sim/transfer_forms.py) and shares the copy engines and the link through the
fluid clocks of sim/copy_engines.py. The host thread's time (host_s, copies it issues itself, syncs) is
a running clock. The template becomes arrays and one numba-compiled loop (sim/schedule_loop.py, cached
on disk) walks every layer-step: a 16K-step, 32-layer replay takes a fraction of a second.
tests/sim/test_engine_equivalence.py proves it equal to the fine-grained SimPy model (sim/actors.py).

Outputs: per-step end time of the compute stream, idle time of the compute stream blamed on what it
waited for (an op, or "<op>.host" for host time spent issuing that op), busy time of compute-stream
ops, copy-engine busy time per direction, and op-level events of chosen steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.copy_engines import LINK_RESOURCES, CopyEngines
from sim.methods.base import RESOURCES, Kernel, OpSpec, Transfer, Work
from sim.schedule_loop import (
    F_AMOUNT,
    F_CA,
    F_ENGINE,
    F_HOST,
    F_ISSUE,
    F_WIRE,
    KIND_KERNEL,
    KIND_TRANSFER,
    N_FIELDS,
    schedule_loop,
)
from sim.transfer_forms import transfer_phases

__all__ = ["ScheduleResult", "run_schedule", "validate_template", "normalise_template", "Event", "HOST_LANE"]

Event = tuple[str, str, float, float, int, int]  # (op, resource, start_s, end_s, step, layer)
HOST_LANE = "host"
_LAGS = {"layer": 0, "prev_layer": 1, "prev_step": 2}


@dataclass(frozen=True)
class ScheduleResult:
    """step_end_s: (S,) compute-stream end of each step (time 0 = decode start).
    stall_s: name -> compute-stream idle seconds blamed on it (whole run): an op name, "<op>.host", or
    "idle" (host-late idle time older than the host intervals kept for attribution).
    busy_s: op -> seconds it held the compute stream (whole run).
    link_busy_s: direction -> seconds transfers were copying (first copy start to last copy end, summed).
    events: op-level events of the recorded steps: one per held resource, the copy phase of a transfer
    on its direction's lane ("h2d"/"d2h"), host time on the "host" lane (sync waits named "<op>:sync")."""

    step_end_s: np.ndarray
    stall_s: dict[str, float]
    events: list[Event]
    busy_s: dict[str, float] = dataclasses.field(default_factory=dict)
    link_busy_s: dict[str, float] = dataclasses.field(default_factory=dict)


def normalise_template(template: Sequence[OpSpec]) -> tuple[OpSpec, ...]:
    """Drop "h2d"/"d2h" from resources: the link is implied by a Transfer's direction."""
    out = []
    for op in template:
        if any(r in LINK_RESOURCES for r in op.resources):
            op = dataclasses.replace(op, resources=tuple(r for r in op.resources if r not in LINK_RESOURCES))
        out.append(op)
    return tuple(out)


def validate_template(template: Sequence[OpSpec]) -> None:
    """Names unique, resources known, dependencies on existing ops (same-layer ones issued earlier)."""
    names = [op.name for op in template]
    if len(set(names)) != len(names):
        raise ValueError(f"template op names must be unique, got {names}")
    seen: set[str] = set()
    for op in template:
        unknown = [r for r in op.resources if r not in RESOURCES]
        if unknown:
            raise ValueError(f"op {op.name!r}: unknown resources {unknown}; valid: {RESOURCES}")
        for dep in op.deps:
            if dep.op not in names:
                raise ValueError(f"op {op.name!r} depends on unknown op {dep.op!r}")
            if dep.lag == "layer" and dep.op not in seen:
                raise ValueError(f"op {op.name!r} waits for {dep.op!r} of the same layer, issued later")
        seen.add(op.name)


def as_work(item: Work | np.ndarray) -> Work:
    """A bare (S, L) array is a Kernel's seconds."""
    return item if isinstance(item, (Kernel, Transfer)) else Kernel(np.asarray(item, dtype=np.float64))


def work_shape(item: Work) -> tuple[int, int]:
    return tuple(np.shape(item.seconds if isinstance(item, Kernel) else item.n_copies))  # type: ignore[return-value]


def _reduce(value: float | np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, int, int]:
    """(values, step stride, layer stride): one value, one per step, one per layer, or all (S, L)."""
    arr = np.asarray(value)
    if arr.ndim == 0 or arr.size == 0:
        return np.array([arr.item() if arr.size else 0], dtype=arr.dtype), 0, 0
    if arr.ndim == 1:  # one value per step, as CostContext.full reads it
        arr = arr[:, None]
    arr = np.broadcast_to(arr, shape)
    first = arr.flat[0]
    if np.all(arr == first):
        return np.array([first]), 0, 0
    if np.all(arr == arr[:, :1]):
        return np.ascontiguousarray(arr[:, 0]), 1, 0
    if np.all(arr == arr[:1, :]):
        return np.ascontiguousarray(arr[0]), 0, 1
    return np.ascontiguousarray(arr).ravel(), shape[1], 1


class _Packer:
    """Values of (op, field) in one flat buffer with per-quantity offset and (step, layer) strides."""

    def __init__(self, n_ops: int, shape: tuple[int, int]) -> None:
        self.shape = shape
        n_q = n_ops * N_FIELDS
        self.off = np.zeros(n_q, dtype=np.int64)
        self.ss = np.zeros(n_q, dtype=np.int64)
        self.ls = np.zeros(n_q, dtype=np.int64)
        self.by_count = np.zeros(n_q, dtype=np.bool_)
        self.parts: list[np.ndarray] = [np.zeros(1)]  # offset 0 holds the constant 0
        self.size = 1

    def put(self, q: int, value: float | np.ndarray) -> None:
        self.put_reduced(q, *_reduce(value, self.shape))

    def put_reduced(self, q: int, part: np.ndarray, ss: int, ls: int) -> None:
        """Store a value already reduced by `_reduce` (same strides)."""
        if part.size == 1 and part[0] == 0.0:
            return  # the shared zero
        self.off[q], self.ss[q], self.ls[q] = self.size, ss, ls
        self.parts.append(np.asarray(part, dtype=np.float64))
        self.size += part.size

    def put_table(self, q: int, table: np.ndarray) -> None:
        """Store values indexed by the op's copy count (its F_AMOUNT) instead of (step, layer)."""
        self.off[q], self.by_count[q] = self.size, True
        self.parts.append(np.asarray(table, dtype=np.float64))
        self.size += table.size

    def buffer(self) -> np.ndarray:
        return np.concatenate(self.parts)


def _pack_transfer(pk: _Packer, base: int, tr: Transfer, dma_latency_s: float) -> None:
    """A transfer's fields. With one copy_s for all layer-steps every field is a function of the copy
    count: stored as a table indexed by it (the loop reads buf[off + n]), not as (S, L) arrays."""
    host_issue = tr.issuer == "host"
    threads = 1 if host_issue else tr.issue_threads
    form = (tr.issue_s, threads, tr.chunk_copies, tr.buffers, tr.convert_fixed_s, tr.convert_per_copy_s)
    n_all = np.asarray(tr.n_copies, dtype=np.int64)
    if n_all.size and int(n_all.min()) < 0:
        raise ValueError(f"Transfer n_copies must be >= 0, got {int(n_all.min())}")
    if np.ndim(tr.copy_s) == 0:
        n, ss, ls = _reduce(n_all, pk.shape)
        counts = np.arange(int(n.max()) + 1 if n.size else 1)
        e = float(tr.copy_s)
        phases = transfer_phases(counts, e, *form)
        nf = counts.astype(np.float64)
        pk.put_reduced(base + F_AMOUNT, n.astype(np.float64), ss, ls)
        put = pk.put_table
    else:
        n = np.ascontiguousarray(n_all).ravel()
        e = np.ascontiguousarray(np.broadcast_to(np.asarray(tr.copy_s, dtype=np.float64), pk.shape)).ravel()
        phases = transfer_phases(n, e, *form)
        nf = n.astype(np.float64)
        pk.put_reduced(base + F_AMOUNT, nf, pk.shape[1], 1)

        def put(q: int, values: np.ndarray) -> None:
            pk.put_reduced(q, values, pk.shape[1], 1)

    for f in range(5):
        put(base + F_CA + f, phases[f])
    put(base + F_ENGINE, nf * e)
    put(base + F_WIRE, nf * np.maximum(e - dma_latency_s, 0.0))
    if host_issue:
        put(base + F_ISSUE, nf * tr.issue_s)


@dataclass
class _Tables:
    """The template as sim/schedule_loop.py reads it: per op its kind, flags, engine group, direction,
    engine count (`rate`), resources and dependencies; the field values packed in `pk`."""

    pk: _Packer
    kind: np.ndarray
    host_issuer: np.ndarray
    group: np.ndarray
    direction: np.ndarray
    rate: np.ndarray
    res_idx: np.ndarray
    n_res: np.ndarray
    dep_op: np.ndarray
    dep_lag: np.ndarray
    n_dep: np.ndarray
    host_sync: np.ndarray


def _work_items(template: Sequence[OpSpec], work: Mapping[str, Work | np.ndarray]) -> dict[str, Work]:
    """Each op's work; all of one (S, L) shape."""
    items = {op.name: as_work(work[op.name]) for op in template}
    shapes = {work_shape(items[op.name]) for op in template}
    if len(shapes) != 1:
        raise ValueError(f"all work must share one (S, L) shape, got {shapes}")
    return items


def _empty_tables(ops: Sequence[OpSpec], shape: tuple[int, int]) -> _Tables:
    n_ops = len(ops)
    max_res = max([len(op.resources) for op in ops] + [1])
    max_dep = max([len(op.deps) for op in ops] + [1])
    return _Tables(
        pk=_Packer(n_ops, shape),
        kind=np.zeros(n_ops, dtype=np.int64),
        host_issuer=np.zeros(n_ops, dtype=np.bool_),
        group=np.zeros(n_ops, dtype=np.int64),
        direction=np.zeros(n_ops, dtype=np.int64),
        rate=np.ones(n_ops),
        res_idx=np.zeros((n_ops, max_res), dtype=np.int64),
        n_res=np.zeros(n_ops, dtype=np.int64),
        dep_op=np.zeros((n_ops, max_dep), dtype=np.int64),
        dep_lag=np.zeros((n_ops, max_dep), dtype=np.int64),
        n_dep=np.zeros(n_ops, dtype=np.int64),
        host_sync=np.zeros(n_ops, dtype=np.bool_),
    )


def _pack_work(tb: _Tables, i: int, item: Work, spec: CopyEngines) -> None:
    """Op i's field values and kind; for a transfer its issuer, engine group, direction and engines."""
    base = i * N_FIELDS
    tb.pk.put(base + F_HOST, item.host_s)
    if isinstance(item, Kernel):
        tb.kind[i] = KIND_KERNEL
        tb.pk.put(base + F_AMOUNT, item.seconds)
        return
    tb.kind[i] = KIND_TRANSFER
    tb.host_issuer[i] = item.issuer == "host"
    tb.group[i] = spec.group(item.direction)
    tb.direction[i] = LINK_RESOURCES.index(item.direction)
    tb.rate[i] = spec.engines(item.direction)
    _pack_transfer(tb.pk, base, item, spec.dma_latency_s)


def _tables(ops: Sequence[OpSpec], items: Mapping[str, Work], spec: CopyEngines) -> _Tables:
    tb = _empty_tables(ops, work_shape(items[ops[0].name]))
    idx = {op.name: i for i, op in enumerate(ops)}
    for i, op in enumerate(ops):
        _pack_work(tb, i, items[op.name], spec)
        for x, r in enumerate(op.resources):
            tb.res_idx[i, x] = RESOURCES.index(r)
        tb.n_res[i] = len(op.resources)
        for x, dep in enumerate(op.deps):
            tb.dep_op[i, x], tb.dep_lag[i, x] = idx[dep.op], _LAGS[dep.lag]
        tb.n_dep[i] = len(op.deps)
        tb.host_sync[i] = op.host_sync
    return tb


def _record_mask(record_steps: Iterable[int], n_steps: int) -> np.ndarray:
    rec = np.zeros(n_steps, dtype=np.bool_)
    for st in record_steps:
        if 0 <= st < n_steps:
            rec[st] = True
    return rec


def _named_stalls(names: Sequence[str], stall: np.ndarray) -> dict[str, float]:
    """The loop's stall array (per op, per op's host time, then unattributed) by name."""
    n_ops = len(names)
    named = {names[i]: float(stall[i]) for i in range(n_ops) if stall[i] > 0.0}
    named.update(
        {f"{names[i]}.host": float(stall[n_ops + i]) for i in range(n_ops) if stall[n_ops + i] > 0.0}
    )
    if stall[2 * n_ops] > 0.0:  # host-late idle time no recorded host interval covers
        named["idle"] = float(stall[2 * n_ops])
    return named


def _named_events(
    names: Sequence[str], ev_name: np.ndarray, ev_lane: np.ndarray, ev_t: np.ndarray, ev_pos: np.ndarray
) -> list[Event]:
    """The loop's events by op and lane name (lanes: the resources, none, the host, the directions)."""
    lanes = [*RESOURCES, "", HOST_LANE, *LINK_RESOURCES]
    op_names = [*names, *(f"{n}:sync" for n in names)]
    return [
        (op_names[a], lanes[b], float(t[0]), float(t[1]), int(p[0]), int(p[1]))
        for a, b, t, p in zip(ev_name.tolist(), ev_lane.tolist(), ev_t, ev_pos, strict=True)
    ]


def run_schedule(
    template: Sequence[OpSpec],
    work: Mapping[str, Work | np.ndarray],
    sync_s: float,
    record_steps: Iterable[int] = (),
    *,
    copy_engines: CopyEngines | None = None,
) -> ScheduleResult:
    """Run the aggregated schedule. work: op name -> Kernel, Transfer, or (S, L) Kernel seconds
    (0 = op absent there). copy_engines: how transfers share engines and link (default: one engine per
    direction, no DMA latency split)."""
    ops = list(normalise_template(template))
    validate_template(ops)
    items = _work_items(ops, work)
    n_steps, n_layers = work_shape(items[ops[0].name])
    tb = _tables(ops, items, copy_engines or CopyEngines())
    uses_compute = any("compute" in op.resources for op in ops)
    rec = _record_mask(record_steps, n_steps)
    max_events = int(rec.sum()) * n_layers * len(ops) * (tb.res_idx.shape[1] + 3)
    ends, stall, busy, link_busy, *events = schedule_loop(
        n_steps, n_layers, float(sync_s), tb.pk.buffer(), tb.pk.off, tb.pk.ss, tb.pk.ls, tb.pk.by_count,
        tb.kind, tb.host_issuer, tb.group, tb.direction, tb.rate, tb.res_idx, tb.n_res, tb.dep_op,
        tb.dep_lag, tb.n_dep, tb.host_sync, RESOURCES.index("compute") if uses_compute else -1,
        len(RESOURCES), rec, max_events,
    )  # fmt: skip
    names = [op.name for op in ops]
    return ScheduleResult(
        step_end_s=np.asarray(ends),
        stall_s=_named_stalls(names, stall),
        events=_named_events(names, *events),
        busy_s={names[i]: float(busy[i]) for i in range(len(ops)) if busy[i] > 0.0},
        link_busy_s={d: float(link_busy[k]) for k, d in enumerate(LINK_RESOURCES)},
    )
