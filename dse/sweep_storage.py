"""Optuna storage for sweeps: opening an RDB URL, the trial budget rule, recovering killed workers.

Any Optuna RDB URL works: `sqlite:///path/study.db` (default, one machine), `postgresql://user@host:
port/db` (many machines share one study), `mysql+pymysql://...`. Heartbeats are on, so a trial whose
worker stopped beating for `GRACE_PERIOD_S` is failed and re-queued by the next worker that starts a
trial; on the worker's own host a dead pid is noticed at once. A trial whose worker died between Optuna
creating it and the worker recording itself on it (a window of milliseconds) has no owner to check and
no heartbeat: it is failed once it has been RUNNING for `ORPHAN_AFTER_S` without a worker.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from dse.errors import DseError

__all__ = ["open_storage", "sqlite_path", "storage_errors", "counts_toward_budget", "recover_interrupted",
           "requeue", "pid_alive", "HEARTBEAT_INTERVAL_S", "GRACE_PERIOD_S", "ORPHAN_AFTER_S"]

HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 60
ORPHAN_AFTER_S = 10  # a live worker records itself on a new trial within milliseconds
_OPEN_ATTEMPTS = 4

_SCHEMES = ("sqlite", "postgresql", "mysql", "oracle", "mssql")


def open_storage(url: str, on_stale: Callable[[Any, Any], None] | None = None, heartbeat: bool = True,
                 start_lock: Path | None = None) -> Any:
    """An optuna RDBStorage for `url` (with heartbeats unless `heartbeat` is False, e.g. for reading);
    DseError naming the URL when it cannot open.

    start_lock: a lock file shared by the workers of this machine; taking a WAITING trial (a re-queued
    one) happens under it, so that two workers never both start the same trial. Optuna checks the
    trial's state inside the update, but SQLite has no row locks: two processes may both read WAITING
    and both write RUNNING (PostgreSQL's SELECT ... FOR UPDATE serialises that by itself)."""
    import optuna

    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url or scheme not in _SCHEMES:
        raise DseError(
            f"storage {url!r} is not an Optuna RDB URL: use sqlite:///path/to/study.db (a file, created if "
            "missing), postgresql://user:password@host:port/database, or another SQLAlchemy URL "
            f"({', '.join(_SCHEMES)})."
        )
    rdb_url = _with_driver(url)
    engine_kwargs: dict[str, Any] = {}
    if scheme == "sqlite":
        path = sqlite_path(url)
        if path is not None:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DseError(
                    f"cannot open the Optuna storage {url!r}: cannot create the directory "
                    f"{Path(path).parent} for the database ({exc.strerror or exc}); give a sqlite:/// "
                    "path under a writable directory"
                ) from None
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    jitter = random.Random(os.getpid())  # workers that collide back off by different amounts
    last: Exception | None = None
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                cls = optuna.storages.RDBStorage if start_lock is None else _start_locked_class()
                extra = {} if start_lock is None else {"start_lock": start_lock}
                return cls(
                    rdb_url, engine_kwargs=engine_kwargs, **extra,
                    heartbeat_interval=HEARTBEAT_INTERVAL_S if heartbeat else None,
                    grace_period=GRACE_PERIOD_S if heartbeat else None,
                    heartbeat_stale_trial_callback=on_stale if heartbeat else None,
                )
        except Exception as exc:  # noqa: BLE001 - becomes one user-facing paragraph
            last = exc
            if not _creation_race(exc):
                break
            time.sleep(0.5 + attempt + jitter.random())
    text = str(last).strip()
    first = text.splitlines()[0] if text else type(last).__name__
    raise DseError(f"cannot open the Optuna storage {url!r}: {first}")


def _start_locked_class() -> type:
    """RDBStorage whose WAITING -> RUNNING transition (Study.ask popping a re-queued trial) holds a file
    lock, re-reading the trial's state under it."""
    import optuna
    from optuna.trial import TrialState

    from dse.file_lock import exclusive

    class StartLockedRDBStorage(optuna.storages.RDBStorage):
        def __init__(self, *args: Any, start_lock: Path, **kwargs: Any) -> None:
            self.start_lock = start_lock
            super().__init__(*args, **kwargs)

        def record_heartbeat(self, trial_id: int) -> None:
            """In Optuna's heartbeat thread: a lost connection is reported once, by the main thread's
            next storage call (storage_errors), not as a thread traceback."""
            from optuna.exceptions import StorageInternalError
            from sqlalchemy.exc import SQLAlchemyError

            try:
                super().record_heartbeat(trial_id)
            except (SQLAlchemyError, StorageInternalError):
                return

        def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
            if state != TrialState.RUNNING:
                return super().set_trial_state_values(trial_id, state, values)
            with exclusive(self.start_lock):
                return super().set_trial_state_values(trial_id, state, values)

    return StartLockedRDBStorage


@contextlib.contextmanager
def storage_errors(url: str, kept: str | Callable[[], str] = "finished trials are kept") -> Iterator[None]:
    """Turn a failure of the Optuna storage `url` (a full disk, a file-size limit, a lost connection)
    into one DseError naming the storage and the cause; `kept` says what survived (text, or a function
    called when the failure happens)."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except Exception as raised:  # noqa: BLE001 - only a storage failure is turned into the message
        exc = _storage_failure(raised, (SQLAlchemyError, StorageInternalError))
        if exc is None:
            raise
        cause = exc.__cause__ if isinstance(exc, StorageInternalError) and exc.__cause__ else exc
        orig = getattr(cause, "orig", None) or cause
        text = " ".join(str(orig).split()) or type(orig).__name__
        note = kept() if callable(kept) else kept
        raise DseError(
            f"the Optuna storage {url!r} failed while the sweep wrote to it: {text} "
            f"({type(orig).__name__}). Nothing finished is lost: {note}. Fix the storage (free disk space, "
            "raise the file-size limit, reconnect the database) and run the same command again."
        ) from None


def sqlite_path(url: str) -> str | None:
    """The database file of a `sqlite:` URL; DseError for an in-memory database (`sqlite://`,
    `sqlite:///:memory:`, `mode=memory`), whose trials would vanish with the process that made them."""
    rest = url.split("://", 1)[1]
    path = rest[1:] if rest.startswith("/") else rest
    path_only = path.split("?", 1)[0]
    if path_only in ("", ":memory:") or "mode=memory" in path or path_only.startswith("file::memory:"):
        raise DseError(
            f"storage {url!r} is an in-memory SQLite database: a sweep's trials and a report's source must "
            "outlast the process, and each worker would see its own empty database. Give a file, e.g. "
            "sqlite:///out/study.db (created if missing), or a server URL (postgresql://user@host/db)."
        )
    return path_only


def _storage_failure(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The storage error `exc` is, or that it was raised while handling (Optuna, cleaning up after a lost
    connection, can itself fail on the dead connection and raise something else: e.g. an UnboundLocalError
    in its trial bookkeeping with the StorageInternalError as its context); None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _creation_race(exc: Exception) -> bool:
    """Workers starting together on an empty database race to create Optuna's tables: retry those."""
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("IntegrityError", "UniqueViolation", "already exists", "duplicate key"))


def _with_driver(url: str) -> str:
    """`postgresql://` means psycopg (v3) to SQLAlchemy 2.1; use psycopg2 when only it is installed."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


def counts_toward_budget(trial: Any) -> bool:
    """COMPLETE, RUNNING, WAITING, or FAIL with a recorded error; not PRUNED (skipped/surplus) and not
    interrupted (FAIL without error: re-queued)."""
    from optuna.trial import TrialState

    if trial.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING):
        return True
    return trial.state == TrialState.FAIL and "error" in trial.user_attrs


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def requeue(ostudy: Any, trial: Any) -> bool:
    """Add a WAITING trial with the parameters of the interrupted `trial` (as enqueue_trial does), keeping
    the grid cell of a GridSampler trial so that the sampler's bookkeeping stays whole.

    A worker killed while sampling leaves some or none of the parameters: a grid trial is re-queued with
    its cell anyway (the grid counts a failed trial's cell as visited, so it would never be drawn
    again), and the parameters it had drawn are kept fixed. Returns whether a trial was added."""
    import optuna

    # killed before, during or after sampling: what was fixed for it (a re-queued trial) and what it drew
    params = {**trial.system_attrs.get("fixed_params", {}), **trial.params}
    if not params and "grid_id" not in trial.system_attrs:
        return False  # nothing was sampled: the sampler draws afresh
    system_attrs: dict[str, Any] = {"fixed_params": dict(params)}
    for key in ("grid_id", "search_space"):
        if key in trial.system_attrs:
            system_attrs[key] = trial.system_attrs[key]
    ostudy.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.WAITING, system_attrs=system_attrs,
        user_attrs={"requeued_from": trial.number},
    ))
    return True


def recover_interrupted(ostudy: Any, host: str) -> int:
    """Mark RUNNING trials of dead workers on `host`, and orphans (RUNNING for `ORPHAN_AFTER_S` with no
    worker recorded, on any host), FAIL (attribute `interrupted`), then re-queue the parameters of every
    interrupted trial not re-queued yet. Returns how many were re-queued."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = ostudy._storage
    now = datetime.now()  # Optuna stamps datetime_start with the naive local time
    for t in ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker")
        if not worker:
            age_s = (now - t.datetime_start).total_seconds() if t.datetime_start else 0.0
            if age_s < ORPHAN_AFTER_S:
                continue  # possibly a live worker between creating the trial and recording itself
            why = f"its worker died before recording itself (RUNNING {age_s:.0f} s with no worker)"
        elif worker.get("host") != host or pid_alive(int(worker.get("pid", -1))):
            continue
        else:
            why = f"worker pid {worker['pid']} on {host} died"
        try:
            storage.set_trial_user_attr(t._trial_id, "interrupted", why)
            storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue
    handled = set(ostudy.user_attrs.get("requeued", []))  # interrupted trials already dealt with
    new, added = [], 0
    for t in ostudy.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        if "error" in t.user_attrs or t.number in handled:
            continue
        added += requeue(ostudy, t)
        new.append(t.number)
    if new:
        ostudy.set_user_attr("requeued", sorted(handled | set(new)))
    return added
