"""Request streams: Poisson arrivals of one shape, or a file of arrivals.

`poisson_requests` draws exponential gaps from `numpy.random.default_rng(seed)`: the same seed at another
rate gives the same arrival pattern scaled in time. `load_requests` reads a CSV (header
arrival_s,input_tokens,output_tokens) or a JSON list of such objects.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import SimInputError
from traces.numbers import REQUESTS, TOKENS, text_to_number
from traces.numbers import SECONDS_OR_ZERO as ARRIVAL_S
from traces.safe_load import MAX_JSON_BYTES, load_user_json
from traces.user_files import UserFileError, read_user_text

__all__ = ["Request", "poisson_requests", "load_requests"]


@dataclass(frozen=True)
class Request:
    arrival_s: float
    input_tokens: int
    output_tokens: int


def poisson_requests(
    rate_per_s: float, n: int, input_tokens: int, output_tokens: int, seed: int = 0
) -> list[Request]:
    """n requests with exponential inter-arrival gaps of mean 1/rate (first at the first gap)."""
    if not rate_per_s > 0:
        raise SimInputError(
            f"the arrival rate must be a positive number of requests per second, got {rate_per_s}"
        )
    gaps = np.random.default_rng(seed).exponential(1.0, n) / rate_per_s
    return [Request(float(t), input_tokens, output_tokens) for t in np.cumsum(gaps)]


_REQUEST_FIELDS = {"arrival_s": ARRIVAL_S, "input_tokens": TOKENS, "output_tokens": TOKENS}
_REQUESTS_FORM = ("expected CSV with header arrival_s,input_tokens,output_tokens (or a JSON list of objects "
                  "with those keys), one request per row")


def load_requests(path: Path) -> list[Request]:
    """A CSV (header arrival_s,input_tokens,output_tokens) or JSON list of such objects, sorted by arrival.

    The file is read as traces.user_files reads every user file (a regular UTF-8 file of bounded size); every
    number is checked against its traces.numbers range (arrival: finite seconds >= 0; tokens: integers),
    at most REQUESTS.hi requests."""
    where = f"--requests {path}"
    try:
        if str(path).endswith(".json"):
            rows = load_user_json(path, "--requests")
        else:
            rows = list(csv.DictReader(read_user_text(path, "--requests", MAX_JSON_BYTES).splitlines()))
    except UserFileError as exc:
        raise SimInputError(str(exc)) from None
    except (ValueError, csv.Error) as exc:
        raise SimInputError(f"{where}: {_REQUESTS_FORM} ({exc})") from None
    if not isinstance(rows, list) or not rows:
        raise SimInputError(f"{where}: {_REQUESTS_FORM}; it holds no request")
    if len(rows) > REQUESTS.hi:
        raise SimInputError(f"{where}: {len(rows)} requests; at most {REQUESTS.hi} per simulation")
    reqs = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or any(k not in row for k in _REQUEST_FIELDS):
            raise SimInputError(f"{where}: request {i + 1}: {_REQUESTS_FORM}, got {row!r}")
        values = []
        for key, bound in _REQUEST_FIELDS.items():
            raw = row[key]
            value = text_to_number(raw, integer=bound.integer) if isinstance(raw, str) else raw
            detail = bound.problem(value if value is not None else raw)
            if detail is not None:
                raise SimInputError(f"{where}: request {i + 1}: {key} {detail}")
            values.append(int(value) if bound.integer else float(value))
        reqs.append(Request(*values))
    return sorted(reqs, key=lambda r: r.arrival_s)
