"""Request streams: Poisson arrivals of one shape, or a file of arrivals.

`poisson_requests` draws exponential gaps from `numpy.random.default_rng(seed)`: the same seed at another
rate gives the same arrival pattern scaled in time. `load_requests` reads a CSV (header
arrival_s,input_tokens,output_tokens) or a JSON list of such objects.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import SimInputError

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


def load_requests(path: Path) -> list[Request]:
    """A CSV (header arrival_s,input_tokens,output_tokens) or JSON list of such objects, sorted by arrival."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SimInputError(f"--requests {path}: cannot read ({exc.strerror})") from None
    try:
        rows = json.loads(text) if str(path).endswith(".json") else list(csv.DictReader(text.splitlines()))
        reqs = [Request(float(r["arrival_s"]), int(r["input_tokens"]), int(r["output_tokens"])) for r in rows]
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise SimInputError(
            f"--requests {path}: expected CSV with header arrival_s,input_tokens,output_tokens (or a JSON "
            f"list of objects with those keys), one request per row ({exc})"
        ) from None
    if not reqs or any(r.arrival_s < 0 or r.input_tokens < 1 or r.output_tokens < 1 for r in reqs):
        raise SimInputError(
            f"--requests {path}: needs at least one request, arrival_s >= 0, token counts >= 1"
        )
    return sorted(reqs, key=lambda r: r.arrival_s)
