"""A measured serving run: per request its prompt and output tokens, when the client issued it and the TTFT
and TPOT the client measured, read from a CSV with the header columns

    prompt_len, output_len, issue_time_s, ttft_ms, tpot_ms

(the format of benchmarks/data/distserve_opt13b_sharegpt_measured_vllm.csv; other columns are allowed).
TPOT is the client's (last token - first token) / (output tokens - 1), 0 for one output token. A file of
several runs names each row's run in a `run` column (pick one with `run=`), or is narrowed by other
columns' values (`where={"rate": "1", ...}`); what is left must be one run. Issue times count from the
run's first issue (the earliest is subtracted).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import SimInputError
from sim.serving.requests import Request
from traces.numbers import REQUESTS, SECONDS_OR_ZERO, TOKENS, Range, text_to_number
from traces.safe_load import MAX_JSON_BYTES
from traces.user_files import UserFileError, read_user_text

__all__ = ["MeasuredRun", "load_measured_run", "COLUMNS"]

COLUMNS = ("prompt_len", "output_len", "issue_time_s", "ttft_ms", "tpot_ms")
MS_OR_ZERO = Range(0, 1e12, unit="milliseconds")
_BOUNDS = {"prompt_len": TOKENS, "output_len": TOKENS, "issue_time_s": SECONDS_OR_ZERO, "ttft_ms": MS_OR_ZERO,
           "tpot_ms": MS_OR_ZERO}


@dataclass(frozen=True)
class MeasuredRun:
    """One run's requests in issue order and what the client measured of each."""

    name: str
    prompt_len: np.ndarray
    output_len: np.ndarray
    issue_time_s: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray

    def requests(self) -> list[Request]:
        """The run's requests, issued at their measured times, for sim.serving."""
        return [Request(float(t), int(p), int(o))
                for t, p, o in zip(self.issue_time_s, self.prompt_len, self.output_len, strict=True)]

    @property
    def rate_per_s(self) -> float:
        """Requests per second over the run's issue span (its N / last issue time)."""
        span = float(self.issue_time_s.max())
        return len(self.prompt_len) / span if span > 0 else float("inf")


def _form(path: Path) -> str:
    return (f"--measured {path}: expected a CSV with header columns {', '.join(COLUMNS)} (other columns "
            "allowed; a `run` column names each row's run), one request per row: prompt and output tokens "
            "(integers >= 1), the issue time in seconds (>= 0), the client's TTFT and TPOT in ms (>= 0)")


def _number(path: Path, line: int, column: str, text: str | None) -> float:
    """The cell's number, checked against its traces.numbers range."""
    bound = _BOUNDS[column]
    value = text_to_number(text, integer=bound.integer) if isinstance(text, str) else None
    detail = bound.problem(value if value is not None else text)
    if detail is not None:
        raise SimInputError(f"--measured {path}: line {line}: {column} {detail}; {_form(path)}")
    return float(value)  # type: ignore[arg-type]


def load_measured_run(path: Path, run: str | None = None, where: dict[str, str] | None = None) -> MeasuredRun:
    """The one run of `path` left after picking `run` (a `run` column's value) and the `where` column values
    (module docstring); a SimInputError naming the file, line and column otherwise."""
    try:
        text = read_user_text(path, "--measured", MAX_JSON_BYTES)
    except UserFileError as exc:
        raise SimInputError(str(exc)) from None
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as exc:
        raise SimInputError(f"{_form(path)} ({exc})") from None
    header = list(rows[0]) if rows else []
    missing = [c for c in COLUMNS if c not in header]
    if not rows or missing:
        why = f"missing column(s) {missing}" if rows else "it holds no row"
        raise SimInputError(f"{_form(path)}; {why}")
    where = dict(where or {})
    if run is not None:
        if "run" not in header:
            raise SimInputError(f"--run {run}: {path} has no `run` column; select rows with --where "
                                f"COLUMN=VALUE on its columns {header}")
        where["run"] = run
    unknown = [c for c in where if c not in header]
    if unknown:
        raise SimInputError(
            f"--where {unknown[0]}=...: {path} has no column {unknown[0]!r}; columns: {header}")
    picked = [(i + 2, r) for i, r in enumerate(rows) if all(str(r[c]).strip() == v for c, v in where.items())]
    if not picked:
        raise SimInputError(f"--run/--where {where}: no row of {path} matches")
    if "run" in header:
        names = sorted({str(r["run"]).strip() for _, r in picked})
        if len(names) > 1:
            raise SimInputError(f"--measured {path}: holds {len(names)} runs ({', '.join(names[:12])}"
                                f"{', ...' if len(names) > 12 else ''}); pick one with --run NAME")
    if len(picked) > REQUESTS.hi:
        raise SimInputError(f"--measured {path}: {len(picked)} requests in the run; at most {REQUESTS.hi}")
    cols = {c: np.array([_number(path, line, c, r[c]) for line, r in picked]) for c in COLUMNS}
    order = np.argsort(cols["issue_time_s"], kind="stable")
    issue = cols["issue_time_s"][order]
    name = run if run is not None else (",".join(f"{k}={v}" for k, v in where.items()) or "all rows")
    lengths = (cols["prompt_len"][order].astype(np.int64), cols["output_len"][order].astype(np.int64))
    return MeasuredRun(name, *lengths, issue - issue[0], cols["ttft_ms"][order], cols["tpot_ms"][order])
