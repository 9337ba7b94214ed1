"""The fine-grained SimPy model: streams, main host thread, copy threads, copies, staging buffers.

Every operation of every layer-step is a SimPy process; every copy of a Transfer is simulated: copy
threads (or the main host thread, issuer "host") issue copies one by one, the transfer's copies move
in order, each staging buffer is refilled only after its conversion kernel emptied it. GPU streams are
SimPy `Resource`s of capacity 1 requested by the main host thread in program order, so each serves its
operations in issue order like a CUDA stream. The main host thread is a process: it spends each op's
host_s, issues copies itself for issuer "host", and waits for host syncs. Copy engines and the link are
shared through the fluid clocks of sim/copy_engines.py, kept as a chain of events in issue order: a
transfer's last copy completes no earlier than its clocks. This is the reference model; sim/schedule.py
is its aggregation (equal by tests). It is exact but slow (one process per operation and per copy):
use it for small cases and for copy-level timelines.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from sim.copy_engines import LINK_RESOURCES, CopyEngines
from sim.methods.base import RESOURCES, Kernel, OpSpec, Transfer, Work
from sim.schedule import HOST_LANE, Event, as_work, normalise_template, validate_template, work_shape

__all__ = ["SimpyResult", "simulate_simpy", "transfer_process"]


@dataclass(frozen=True)
class SimpyResult:
    """step_end_s: (S,) end of each step's last compute-stream op; events: op-level events of recorded
    steps (op, resource, start, end, step, layer), as sim.schedule.ScheduleResult.events; copy_events:
    per copy (op:copy#j, "h2d"/"d2h", ...); link_busy_s: direction -> copying seconds (whole run)."""

    step_end_s: np.ndarray
    events: list[Event]
    copy_events: list[Event]
    link_busy_s: dict[str, float]


def _at(value: float | np.ndarray, step: int, layer: int) -> float:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return float(arr)
    return float(arr[step]) if arr.ndim == 1 else float(arr[step, layer])  # 1-D: one value per step


class _CopyPipeline:
    """The copies of one transfer at one (step, layer): issued one by one, copied in order, each staging
    buffer refilled only after its conversion kernel emptied it (see `transfer_process`)."""

    def __init__(
        self,
        env: simpy.Environment,
        tr: Transfer,
        step: int,
        layer: int,
        log: list[Event] | None,
        name: str,
        barrier: simpy.Event | None,
        copies_done: simpy.Event | None,
    ) -> None:
        self.env, self.tr, self.step, self.layer = env, tr, step, layer
        self.log, self.name, self.barrier, self.copies_done = log, name, barrier, copies_done
        self.n = int(np.asarray(tr.n_copies)[step, layer])
        self.copy_s = _at(tr.copy_s, step, layer)
        self.copied = [env.event() for _ in range(self.n)]
        self.chunk = tr.chunk_copies if tr.chunk_copies > 0 else self.n
        self.n_chunks = -(-self.n // self.chunk)
        self.converted = [env.event() for _ in range(self.n_chunks)]
        self.issued: list[simpy.Event] = []

    def issue_thread(self, t: int) -> Generator[simpy.Event, object, None]:
        """Copy thread t issues copies t, t + threads, ..."""
        for j in range(t, self.n, self.tr.issue_threads):
            yield self.env.timeout(self.tr.issue_s)
            self.issued[j].succeed()

    def engine(self) -> Generator[simpy.Event, object, None]:
        """The copies in order, each once issued and its staging buffer free."""
        env, tr = self.env, self.tr
        for j in range(self.n):
            yield self.issued[j]
            m = j // self.chunk
            if tr.chunk_copies > 0 and j % self.chunk == 0 and m >= tr.buffers:
                yield self.converted[m - tr.buffers]  # staging buffer still being converted
            start = env.now
            yield env.timeout(self.copy_s)
            if j == self.n - 1 and self.barrier is not None:
                yield from self._wait_for_clocks()
            if self.log is not None:
                self.log.append((f"{self.name}:copy{j}", tr.direction, start, env.now, self.step, self.layer))
            self.copied[j].succeed()
        if self.copies_done is not None:
            self.copies_done.succeed(self.env.now)

    def _wait_for_clocks(self) -> Generator[simpy.Event, object, None]:
        """The last copy completes no earlier than the engine and link clocks (the barrier's value)."""
        not_before = yield self.barrier
        if not_before > self.env.now:  # type: ignore[operator]
            yield self.env.timeout(not_before - self.env.now)  # type: ignore[operator]

    def converter(self) -> Generator[simpy.Event, object, None]:
        """Each chunk's conversion once its last copy landed; ends with the last conversion."""
        tr = self.tr
        for m in range(self.n_chunks):
            last = min((m + 1) * self.chunk, self.n) - 1
            yield self.copied[last]
            if tr.chunk_copies > 0:
                q = last - m * self.chunk + 1
                yield self.env.timeout(tr.convert_fixed_s + q * tr.convert_per_copy_s)
            self.converted[m].succeed()


def transfer_process(
    env: simpy.Environment,
    tr: Transfer,
    step: int,
    layer: int,
    log: list[Event] | None = None,
    name: str = "transfer",
    issued: list[simpy.Event] | None = None,
    barrier: simpy.Event | None = None,
    copies_done: simpy.Event | None = None,
) -> Generator[simpy.Event, object, None]:
    """Simulate the copies of `tr` at (step, layer) copy by copy; ends when the last conversion ends.

    issued: issue events made by the caller (the main host thread issues); None: `issue_threads` copy
    threads issue from now. barrier: an event whose value is the time before which the last copy may
    not complete (the engine and link clocks). copies_done: succeeded when the last copy completes."""
    pipe = _CopyPipeline(env, tr, step, layer, log, name, barrier, copies_done)
    if issued is None:
        pipe.issued = [env.event() for _ in range(pipe.n)]
        for t in range(min(tr.issue_threads, pipe.n)):
            env.process(pipe.issue_thread(t))
    else:
        pipe.issued = issued
    env.process(pipe.engine())
    yield env.process(pipe.converter())


def _amount(work: Work, step: int, layer: int) -> float:
    if isinstance(work, Kernel):
        return float(work.seconds[step, layer])
    return float(np.asarray(work.n_copies)[step, layer])


class _StepModel:
    """Every op of every layer-step of a template as SimPy processes: the main host thread issues them
    in program order onto the GPU streams; transfers share the engine and link clocks."""

    def __init__(
        self,
        ops: Sequence[OpSpec],
        items: Mapping[str, Work],
        sync_s: float,
        record: set[int],
        record_copies: bool,
        spec: CopyEngines,
    ) -> None:
        self.ops, self.items, self.sync_s, self.spec = ops, items, sync_s, spec
        self.record, self.record_copies = record, record_copies
        self.n_steps, self.n_layers = work_shape(items[ops[0].name])
        self.env = simpy.Environment()
        self.streams = {r: simpy.Resource(self.env, capacity=1) for r in RESOURCES}
        self.done: dict[tuple[str, int, int], simpy.Event] = {}
        self.compute_end = np.zeros(self.n_steps)
        self.events: list[Event] = []
        self.copy_events: list[Event] = []
        self.uses_compute = any("compute" in op.resources for op in ops)
        self.link_busy = {d: 0.0 for d in LINK_RESOURCES}
        # fluid clocks (sim/copy_engines.py): the last event of each chain carries the clock's time
        self.engine_clock: dict[int, simpy.Event] = {}
        self.wire_clock: dict[str, simpy.Event] = {}

    def result(self) -> SimpyResult:
        return SimpyResult(
            # a step without compute work ends where the last did
            step_end_s=np.maximum.accumulate(self.compute_end),
            events=sorted(self.events, key=lambda e: (e[2], e[0])),
            copy_events=self.copy_events,
            link_busy_s=self.link_busy,
        )

    def _ready(self, value: float = 0.0) -> simpy.Event:
        ev = self.env.event()
        ev.succeed(value)
        return ev

    def _dep_events(self, op: OpSpec, step: int, layer: int) -> list[simpy.Event]:
        out = []
        for dep in op.deps:
            if dep.lag == "layer":
                key = (dep.op, step, layer)
            elif dep.lag == "prev_step":
                key = (dep.op, step - 1, layer)
            else:
                key = (dep.op, step, layer - 1) if layer > 0 else (dep.op, step - 1, self.n_layers - 1)
            if key in self.done:
                out.append(self.done[key])
        return out

    def _clocks(
        self,
        tr: Transfer,
        step: int,
        layer: int,
        started: simpy.Event,
        prev_e: simpy.Event,
        prev_w: simpy.Event,
        new_e: simpy.Event,
        new_w: simpy.Event,
    ) -> Generator[simpy.Event, object, None]:
        """Advance the engine and link clocks in issue order; `new_*` get the clocks' new times."""
        s = yield started
        n = float(np.asarray(tr.n_copies)[step, layer])
        e = _at(tr.copy_s, step, layer)
        ce = yield prev_e
        new_e.succeed(max(ce, s) + n * e / self.spec.engines(tr.direction))
        cw = yield prev_w
        new_w.succeed(max(cw, s) + n * max(e - self.spec.dma_latency_s, 0.0))

    def _run_op(
        self, op: OpSpec, step: int, layer: int, reqs: list, deps: list, fin: simpy.Event, extra: tuple | None
    ) -> Generator[simpy.Event, object, None]:
        """Op (step, layer) on its streams once they and its dependencies are ready."""
        env = self.env
        yield env.all_of([*reqs, *deps])
        start = env.now
        item = self.items[op.name]
        if _amount(item, step, layer) <= 0:
            pass  # pure host work
        elif isinstance(item, Kernel):
            yield env.timeout(float(item.seconds[step, layer]))
        else:
            yield from self._run_transfer(op.name, item, step, layer, start, extra)
        for r, req in zip(op.resources, reqs, strict=True):
            self.streams[r].release(req)
        if "compute" in op.resources:
            self.compute_end[step] = max(self.compute_end[step], env.now)
        if step in self.record:
            for r in op.resources or ("",):
                self.events.append((op.name, r, start, env.now, step, layer))
        fin.succeed()

    def _run_transfer(
        self, name: str, item: Transfer, step: int, layer: int, start: float, extra: tuple
    ) -> Generator[simpy.Event, object, None]:
        issued, started, barrier = extra
        started.succeed(start)
        copies_done = self.env.event()
        log = self.copy_events if (self.record_copies and step in self.record) else None
        yield self.env.process(
            transfer_process(self.env, item, step, layer, log, name, issued, barrier, copies_done)
        )
        f = copies_done.value
        self.link_busy[item.direction] += f - start
        if step in self.record:
            self.events.append((name, item.direction, start, f, step, layer))

    def _skip_op(self, deps: list, fin: simpy.Event) -> Generator[simpy.Event, object, None]:
        yield self.env.all_of(deps)
        fin.succeed()

    def _start_transfer(self, item: Transfer, step: int, layer: int, amount: float, by_host: bool) -> tuple:
        """Events of a transfer about to be issued: (issue events if the host issues, started, barrier);
        chains its engine and link clocks after the previous transfer's."""
        env = self.env
        n = int(amount)
        issued = [env.event() for _ in range(n)] if by_host else None
        started, barrier = env.event(), env.event()
        g, d = self.spec.group(item.direction), item.direction
        new_e, new_w = env.event(), env.event()
        prev_e = self.engine_clock[g] if g in self.engine_clock else self._ready()
        prev_w = self.wire_clock[d] if d in self.wire_clock else self._ready()
        self.engine_clock[g], self.wire_clock[d] = new_e, new_w
        env.process(self._clocks(item, step, layer, started, prev_e, prev_w, new_e, new_w))
        env.process(_barrier(env, new_e, new_w, barrier))
        return issued, started, barrier

    def _issue(self, op: OpSpec, step: int, layer: int) -> Generator[simpy.Event, object, None]:
        """The main host thread issues op (step, layer): its host time, copies it issues, its sync."""
        env, item = self.env, self.items[op.name]
        fin = env.event()
        deps = self._dep_events(op, step, layer)
        self.done[(op.name, step, layer)] = fin
        amount = _amount(item, step, layer)
        host_s = _at(item.host_s, step, layer)
        if amount <= 0 and host_s <= 0:
            env.process(self._skip_op(deps, fin))
            return
        t0 = env.now
        if host_s > 0:
            yield env.timeout(host_s)
        reqs = [self.streams[r].request() for r in op.resources]
        extra = None
        by_host = isinstance(item, Transfer) and amount > 0 and item.issuer == "host"
        if isinstance(item, Transfer) and amount > 0:
            extra = self._start_transfer(item, step, layer, amount, by_host)
        env.process(self._run_op(op, step, layer, reqs, deps, fin, extra))
        if by_host:
            for j in range(int(amount)):
                yield env.timeout(item.issue_s)
                extra[0][j].succeed()  # type: ignore[index]
        if step in self.record and env.now > t0:
            self.events.append((op.name, HOST_LANE, t0, env.now, step, layer))
        if op.host_sync:
            t1 = env.now
            yield fin
            yield env.timeout(self.sync_s)
            if step in self.record:
                self.events.append((f"{op.name}:sync", HOST_LANE, t1, env.now, step, layer))

    def host(self) -> Generator[simpy.Event, object, None]:
        """The main host thread: every op of every layer-step in program order."""
        for step in range(self.n_steps):
            for layer in range(self.n_layers):
                for op in self.ops:
                    yield from self._issue(op, step, layer)
            if not self.uses_compute:  # no compute stream: a step ends when the host is done with it
                self.compute_end[step] = self.env.now


def simulate_simpy(
    template: Sequence[OpSpec],
    work: Mapping[str, Work | np.ndarray],
    sync_s: float,
    record_steps: Iterable[int] = (),
    record_copies: bool = False,
    *,
    copy_engines: CopyEngines | None = None,
) -> SimpyResult:
    """Simulate every op (and every copy) of every layer-step with SimPy; see the module docstring."""
    template = normalise_template(template)
    validate_template(template)
    ops = list(template)
    items = {op.name: as_work(work[op.name]) for op in ops}
    model = _StepModel(ops, items, sync_s, set(record_steps), record_copies, copy_engines or CopyEngines())
    model.env.process(model.host())
    model.env.run()
    return model.result()


def _barrier(env: simpy.Environment, new_e: simpy.Event, new_w: simpy.Event, barrier: simpy.Event):
    xe = yield new_e
    xw = yield new_w
    barrier.succeed(max(xe, xw))  # type: ignore[call-overload]
