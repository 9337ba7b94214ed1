"""The compiled (numba, cached on disk) layer-step loop of the aggregated engine (sim/schedule.py).

The template is data: per op its kind, resources, dependencies and flags; per (op, field) a value at
(step, layer) read from one flat buffer as buf[off[q] + step * ss[q] + layer * ls[q]] (strides 0 for a
value constant over steps or layers). Fields: see F_* below. Semantics: sim/methods/base.py and
sim/copy_engines.py; sim/actors.py simulates the same rules event by event.

The loop is split into `@njit` helpers inlined into `_run_steps`. Arrays travel in named tuples:
`Fields` (the flat buffer), `Template` (the ops), `Clocks` (the times and totals the loop advances),
`HostLog` (a ring of recent host intervals, to blame compute-stream idle time on) and `Events` (the
recorded events). `schedule_loop` allocates them; `_run_steps` walks the layer-steps compiled without
numba's reference counting (`_nrt=False`): it allocates nothing and only reads and writes arrays its
caller owns, and reading an array out of a tuple, or passing it to a helper, would otherwise update
the array's reference count each time, which costs more than the loop's arithmetic. The helpers stay
in this one file because numba's disk cache of `schedule_loop` is keyed on this file's source only.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

# fields of an op in the flat buffer (q = op * N_FIELDS + field)
F_AMOUNT, F_HOST, F_CA, F_CB, F_PA, F_PB, F_K, F_ENGINE, F_WIRE, F_ISSUE = range(10)
N_FIELDS = 10
KIND_KERNEL, KIND_TRANSFER = 0, 1
LAG_LAYER, LAG_PREV_LAYER, LAG_PREV_STEP = 0, 1, 2
# what the compute stream waited for last, when not an op: nothing (it was free last), the host
_NO_WAIT, _HOST_LATE = -2, -1

Fields = namedtuple("Fields", "buf off ss ls by_count")
Template = namedtuple(
    "Template",
    "kind host_issuer group direction rate res_idx n_res dep_op dep_lag n_dep host_sync"
    " compute_r n_resources",
)
# free (resource): when each resource is next free. end (op): ends so far in this layer;
# prev_layer_end, prev_step_end (op): the ends that lagged dependencies read; end_by_layer (op, layer):
# each op's last end at each layer. engine (copy-engine group), wire (direction): the fluid clocks of
# sim/copy_engines.py. stall, busy, link_busy: the totals schedule_loop returns.
Clocks = namedtuple(
    "Clocks",
    "free end prev_layer_end prev_step_end end_by_layer engine wire stall busy link_busy",
)
HostLog = namedtuple("HostLog", "start end owner")
# name: an op, or n_ops + op for its host sync; lane: a resource, or n_resources (the op holds none),
# n_resources + 1 (the host), n_resources + 2 + direction (the link); t: (start, end); pos: (step, layer)
Events = namedtuple("Events", "name lane t pos")


@numba.njit(cache=True, inline="always")
def _val(fields, q, step, layer):
    return fields.buf[fields.off[q] + step * fields.ss[q] + layer * fields.ls[q]]


@numba.njit(cache=True, inline="always")
def _tval(fields, q, step, layer, count):
    """A transfer's field: from a table indexed by its copy count, or by (step, layer)."""
    if fields.by_count[q]:
        return fields.buf[fields.off[q] + count]
    return _val(fields, q, step, layer)


@numba.njit(cache=True, inline="always")
def _holds(res_idx, n_res, i, r):
    for x in range(n_res[i]):
        if res_idx[i, x] == r:
            return True
    return False


@numba.njit(cache=True, inline="always")
def _dep_end(clk, j, lag):
    """When dependency op j (read with lag `lag`) ended."""
    if lag == LAG_LAYER:
        return clk.end[j]
    return clk.prev_layer_end[j] if lag == LAG_PREV_LAYER else clk.prev_step_end[j]


@numba.njit(cache=True, inline="always")
def _after_deps(tpl, clk, i, s):
    """The later of s and the ends of op i's dependencies."""
    for d in range(tpl.n_dep[i]):
        t = _dep_end(clk, tpl.dep_op[i, d], tpl.dep_lag[i, d])
        if t > s:
            s = t
    return s


@numba.njit(cache=True, inline="always")
def _record(ev, nev, name, lane, t0, t1, step, layer):
    """Append one event; -> the new event count."""
    ev.name[nev], ev.lane[nev] = name, lane
    ev.t[nev, 0], ev.t[nev, 1] = t0, t1
    ev.pos[nev, 0], ev.pos[nev, 1] = step, layer
    return nev + 1


@numba.njit(cache=True, inline="always")
def _log_host(log, nseg, t0, t1, owner):
    """Keep host interval [t0, t1) spent for `owner` in the ring; -> the new interval count."""
    slot = nseg % log.start.shape[0]
    log.start[slot], log.end[slot], log.owner[slot] = t0, t1, owner
    return nseg + 1


@numba.njit(cache=True, inline="always")
def _blame_host(clk, log, nseg, free_s, start_s, unattributed):
    """Compute-stream idle [free_s, start_s) while the host was late: blame the host intervals covering
    it, newest first, the rest (older than the ring keeps) on `unattributed`."""
    ring = log.start.shape[0]
    cov = start_s
    jj = nseg - 1
    while jj >= 0 and jj > nseg - 1 - ring:
        slot = jj % ring
        a = max(log.start[slot], free_s)
        b = min(log.end[slot], start_s)
        if b > a:
            clk.stall[log.owner[slot]] += b - a
        cov = a if a < cov else cov
        if log.start[slot] <= free_s:
            break
        jj -= 1
    if cov > free_s:
        clk.stall[unattributed] += cov - free_s


@numba.njit(cache=True, inline="always")
def _start_on_compute(tpl, clk, i, h0):
    """(start, what it waited for last: _NO_WAIT, _HOST_LATE or an op) of op i on the compute stream."""
    s = clk.free[tpl.compute_r]
    w = _NO_WAIT
    if h0 > s:
        s = h0
        w = _HOST_LATE
    for x in range(tpl.n_res[i]):
        r = tpl.res_idx[i, x]
        if r != tpl.compute_r and clk.free[r] > s:
            s = clk.free[r]
            w = i
    for d in range(tpl.n_dep[i]):
        j = tpl.dep_op[i, d]
        t = _dep_end(clk, j, tpl.dep_lag[i, d])
        if t > s:
            s = t
            w = j
    return s, w


@numba.njit(cache=True, inline="always")
def _compute_start(tpl, clk, log, nseg, i, h0):
    """Start of op i on the compute stream; the stream's idle time before it is blamed in clk.stall."""
    free_s = clk.free[tpl.compute_r]
    s, w = _start_on_compute(tpl, clk, i, h0)
    if w == _HOST_LATE:
        _blame_host(clk, log, nseg, free_s, s, 2 * tpl.kind.shape[0])
    elif w != _NO_WAIT:
        clk.stall[w] += s - free_s
    return s


@numba.njit(cache=True, inline="always")
def _stream_start(tpl, clk, i, h0):
    """Start of op i off the compute stream: host issue, its resources and its dependencies."""
    s = h0
    for x in range(tpl.n_res[i]):
        r = tpl.res_idx[i, x]
        if clk.free[r] > s:
            s = clk.free[r]
    return _after_deps(tpl, clk, i, s)


@numba.njit(cache=True, inline="always")
def _transfer_end(fields, tpl, clk, i, step, layer, cnt, s, h0):
    """(end, copies done) of transfer op i started at s; advances its engine and wire clocks."""
    base = i * N_FIELDS
    src = h0 if tpl.host_issuer[i] else s
    f = max(src + _tval(fields, base + F_CA, step, layer, cnt),
            s + _tval(fields, base + F_CB, step, layer, cnt))  # fmt: skip
    p = max(src + _tval(fields, base + F_PA, step, layer, cnt),
            s + _tval(fields, base + F_PB, step, layer, cnt))  # fmt: skip
    g, dr = tpl.group[i], tpl.direction[i]
    xe = max(clk.engine[g], s) + _tval(fields, base + F_ENGINE, step, layer, cnt) / tpl.rate[i]
    clk.engine[g] = xe
    xw = max(clk.wire[dr], s) + _tval(fields, base + F_WIRE, step, layer, cnt)
    clk.wire[dr] = xw
    f = max(f, max(xe, xw))
    end = max(p, f) + _tval(fields, base + F_K, step, layer, cnt)
    return end, f


@numba.njit(cache=True, inline="always")
def _host_work_s(fields, tpl, i, step, layer, amt, hs, cnt):
    """Host seconds op i takes before the host moves on: its host time and copies it issues itself."""
    hw = hs
    if tpl.kind[i] == KIND_TRANSFER and tpl.host_issuer[i] and amt > 0.0:
        hw += _tval(fields, i * N_FIELDS + F_ISSUE, step, layer, cnt)
    return hw


@numba.njit(cache=True, inline="always")
def _finish(tpl, clk, ev, nev, record, i, step, layer, s, end):
    """Op i ran [s, end): its end, when its resources are free, its events; -> the event count."""
    clk.end[i] = end
    clk.end_by_layer[i, layer] = end
    for x in range(tpl.n_res[i]):
        clk.free[tpl.res_idx[i, x]] = end
    if record:
        for x in range(max(tpl.n_res[i], 1)):
            lane = tpl.res_idx[i, x] if tpl.n_res[i] > 0 else tpl.n_resources
            nev = _record(ev, nev, i, lane, s, end, step, layer)
    return nev


@numba.njit(cache=True, inline="always")
def _host_sync(tpl, log, ev, nseg, nev, record, i, step, layer, host, end, sync_s):
    """The host waits for op i's end and syncs; -> (host, interval count, event count)."""
    t = (end if end > host else host) + sync_s
    nseg = _log_host(log, nseg, host, t, i)
    if record:
        nev = _record(ev, nev, tpl.kind.shape[0] + i, tpl.n_resources + 1, host, t, step, layer)
    return t, nseg, nev


@numba.njit(cache=True, inline="always")
def _run_op(fields, tpl, clk, log, ev, i, step, layer, host, nseg, nev, record, sync_s):
    """Issue and run op i at (step, layer); -> (host clock, interval count, event count)."""
    n_ops = tpl.kind.shape[0]
    amt = _val(fields, i * N_FIELDS + F_AMOUNT, step, layer)
    hs = _val(fields, i * N_FIELDS + F_HOST, step, layer)
    if amt <= 0.0 and hs <= 0.0:  # absent: ends when the host and its dependencies are done
        s = _after_deps(tpl, clk, i, host)
        clk.end[i] = s
        clk.end_by_layer[i, layer] = s
        return host, nseg, nev
    h0 = host + hs  # the op may start once the host has spent its host time
    cnt = int(amt) if tpl.kind[i] == KIND_TRANSFER else 0
    hw = _host_work_s(fields, tpl, i, step, layer, amt, hs, cnt)
    if hw > 0.0:
        nseg = _log_host(log, nseg, host, host + hw, n_ops + i)
        if record:
            nev = _record(ev, nev, i, tpl.n_resources + 1, host, host + hw, step, layer)
    holds_compute = tpl.compute_r >= 0 and _holds(tpl.res_idx, tpl.n_res, i, tpl.compute_r)
    if holds_compute:
        s = _compute_start(tpl, clk, log, nseg, i, h0)
    else:
        s = _stream_start(tpl, clk, i, h0)
    if amt <= 0.0:
        end = s  # pure host work: nothing on the GPU
    elif tpl.kind[i] == KIND_KERNEL:
        end = s + amt
    else:
        end, f = _transfer_end(fields, tpl, clk, i, step, layer, cnt, s, h0)
        dr = tpl.direction[i]
        clk.link_busy[dr] += f - s
        if record:
            nev = _record(ev, nev, i, tpl.n_resources + 2 + dr, s, f, step, layer)
    if holds_compute:
        clk.busy[i] += end - s
    nev = _finish(tpl, clk, ev, nev, record, i, step, layer, s, end)
    host = host + hw
    if tpl.host_sync[i]:
        host, nseg, nev = _host_sync(tpl, log, ev, nseg, nev, record, i, step, layer, host, end, sync_s)
    return host, nseg, nev


@numba.njit(cache=True, inline="always")
def _run_layer(fields, tpl, clk, log, ev, step, layer, host, nseg, nev, record, sync_s):
    """All ops of one layer-step in issue order; -> (host clock, interval count, event count)."""
    n_ops = tpl.kind.shape[0]
    for i in range(n_ops):
        clk.prev_layer_end[i] = clk.end[i]
        clk.prev_step_end[i] = clk.end_by_layer[i, layer]
    for i in range(n_ops):
        host, nseg, nev = _run_op(fields, tpl, clk, log, ev, i, step, layer, host, nseg, nev, record, sync_s)
    return host, nseg, nev


@numba.njit(cache=True, _nrt=False)
def _run_steps(fields, tpl, clk, log, ev, rec, sync_s, ends):
    """Every layer-step in order: ends[step] = the step's compute-stream end; -> the event count."""
    host, nseg, nev = 0.0, 0, 0
    for step in range(ends.shape[0]):
        record = rec[step]
        for layer in range(clk.end_by_layer.shape[1]):
            host, nseg, nev = _run_layer(
                fields, tpl, clk, log, ev, step, layer, host, nseg, nev, record, sync_s
            )
        ends[step] = clk.free[tpl.compute_r] if tpl.compute_r >= 0 else host
    return nev


@numba.njit(cache=True, inline="always")
def _new_clocks(n_ops, n_layers, n_resources):
    return Clocks(
        np.zeros(n_resources), np.zeros(n_ops), np.zeros(n_ops), np.zeros(n_ops), np.zeros((n_ops, n_layers)),
        np.zeros(2), np.zeros(2), np.zeros(2 * n_ops + 1), np.zeros(n_ops), np.zeros(2),
    )  # fmt: skip


@numba.njit(cache=True, inline="always")
def _new_events(max_events):
    return Events(
        np.empty(max_events, dtype=np.int64), np.empty(max_events, dtype=np.int64),
        np.empty((max_events, 2)), np.empty((max_events, 2), dtype=np.int64),
    )  # fmt: skip


@numba.njit(cache=True)
def schedule_loop(  # noqa: PLR0913 (the arguments are the template)
    n_steps, n_layers, sync_s, buf, off, ss, ls, by_count,
    kind, host_issuer, group, direction, rate, res_idx, n_res, dep_op, dep_lag, n_dep, host_sync,
    compute_r, n_resources, rec, max_events,
):  # fmt: skip
    """-> (step ends, stall, busy, link busy, event names, lanes, times, positions): sim/schedule.py."""
    fields = Fields(buf, off, ss, ls, by_count)
    tpl = Template(
        kind, host_issuer, group, direction, rate, res_idx, n_res, dep_op, dep_lag, n_dep, host_sync,
        compute_r, n_resources,
    )  # fmt: skip
    n_ops = kind.shape[0]
    clk = _new_clocks(n_ops, n_layers, n_resources)
    ring = 64 + 4 * n_ops
    log = HostLog(np.zeros(ring), np.zeros(ring), np.zeros(ring, dtype=np.int64))
    ev = _new_events(max_events)
    ends = np.empty(n_steps)
    nev = _run_steps(fields, tpl, clk, log, ev, rec, sync_s, ends)
    return ends, clk.stall, clk.busy, clk.link_busy, ev.name[:nev], ev.lane[:nev], ev.t[:nev], ev.pos[:nev]
