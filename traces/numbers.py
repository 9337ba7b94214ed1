"""One rule for every number a user gives: finite, of the right type, inside a documented range.

Every numeric input (command-line flags, study fields, hardware and software profiles, `--prices`,
request files, synthetic specs, microbenchmark JSON, trace metadata) is checked against a `Range`:

    SEED.problem(-1)       -> "must be an integer in [0, 4294967295] (numpy seeds), got -1"
    TOKENS.problem(1.5)    -> "must be an integer in [1, 16777216] (tokens), got 1.5"
    SECONDS.problem(nan)   -> "must be a finite number > 0 (seconds), got nan"
    SEED.check(7, "--seed") -> 7;  SEED.check(-1, "--seed") raises NumberError("--seed must be ...")

An integer is an `int` (or an integral float such as YAML's `4.0e+10`), never `True` or 1.5; a number is
an `int` or `float`, never a boolean or a string; NaN and infinity are never in range. The upper bounds
also bound what one command may compute (a batch of 10**9 sequences, a 2**40-token context or 10**7
requests are refused with the limit, instead of running for hours). `docs/inputs.md` lists the ranges.

The ground floor (torch-free, no dependencies): `traces`, `sim`, `freekv_runtime` and `dse` all check
their numbers here, so the ranges and the wording are the same everywhere. `text_to_number` parses a
command-line or `key=value` string with the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NumberError",
    "Range",
    "text_to_number",
    "SEED",
    "TOKENS",
    "CONTEXT_TOKENS",
    "BATCH",
    "REQUESTS",
    "SAMPLES",
    "TRIALS",
    "LAYERS",
    "SECONDS",
    "SECONDS_OR_ZERO",
    "FRACTION",
    "OPEN_FRACTION",
    "COSINE",
    "RATE_PER_S",
    "MILLISECONDS",
    "SYNTHETIC_STEPS",
    "SYNTHETIC_SEQS",
    "SYNTHETIC_PAGES",
    "STANDARD_DEVIATION",
    "COUNT",
    "USD_PER_HOUR",
]


class NumberError(ValueError):
    """A number outside its range, not finite or of the wrong type; the message names the input."""


@dataclass(frozen=True)
class Range:
    """Valid values: `integer` or any real number, between `lo` and `hi` (open ends where `lo_open` /
    `hi_open`), always finite. `unit` says what the number counts (shown in messages); `why` why the
    upper bound is where it is."""

    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False
    unit: str = ""
    why: str = ""

    def describe(self) -> str:
        """'an integer in [1, 65536] (sequences)', 'a finite number > 0 (seconds)', ..."""
        kind = "an integer" if self.integer else "a finite number"
        lo_text, hi_text = _num_text(self.lo), _num_text(self.hi)
        if math.isinf(self.hi):
            where = f"{'>' if self.lo_open else '>='} {lo_text}"
        else:
            where = f"in {'(' if self.lo_open else '['}{lo_text}, {hi_text}{')' if self.hi_open else ']'}"
        notes = ", ".join(x for x in (self.unit, self.why) if x)
        return f"{kind} {where}" + (f" ({notes})" if notes else "")

    def problem(self, value: Any) -> str | None:
        """None when `value` is valid, else what is wrong ('must be ..., got ...'), unnamed."""
        got = f"got {value!r}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be {self.describe()}, {got}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be {self.describe()}, {got}"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return f"must be {self.describe()}, {got}"
        below = value <= self.lo if self.lo_open else value < self.lo
        above = value >= self.hi if self.hi_open else value > self.hi
        if below or above:
            return f"must be {self.describe()}, {got}"
        return None

    def check(self, value: Any, name: str, error: type[Exception] = NumberError) -> Any:
        """`value` (an int for integer ranges, else a float) or `error("<name> must be ..., got ...")`."""
        detail = self.problem(value)
        if detail is not None:
            raise error(f"{name} {detail}")
        return int(value) if self.integer else float(value)

    def validate(self, value: Any) -> Any:
        """The checked value, or NumberError(detail) without a name (for pydantic's BeforeValidator, which
        names the field itself)."""
        detail = self.problem(value)
        if detail is not None:
            raise NumberError(detail)
        return int(value) if self.integer else float(value)

    def parse(self, text: str, name: str, error: type[Exception] = NumberError) -> Any:
        """The number written in `text` (a flag's value), checked; `error` naming `name` otherwise."""
        value = text_to_number(text, integer=self.integer)
        if value is None:
            raise error(f"{name} must be {self.describe()}, got {text!r}")
        return self.check(value, name, error)


def text_to_number(text: str, integer: bool = False) -> int | float | None:
    """The number `text` spells ('12', '1e3', '0.5', 'nan' -> float nan), None when it spells none.

    With `integer`, an integral spelling ('12', '1e3', '2.0') becomes an int and anything else stays a
    float (so that the range check says why it is not an integer); digits beyond 4300 are no number."""
    s = text.strip().replace("_", "") if isinstance(text, str) else ""
    if not s or s.lower() in ("true", "false"):
        return None
    try:
        return int(s, 10)
    except ValueError:
        pass
    try:
        value = float(s)
    except (ValueError, OverflowError):
        return None
    if integer and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _num_text(x: float) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


_TOKEN_LIMIT = 2**24
SEED = Range(0, 2**32 - 1, integer=True, why="numpy seeds")
TOKENS = Range(
    1, _TOKEN_LIMIT, integer=True, unit="tokens", why="at most 2**24: beyond any model's positions"
)
CONTEXT_TOKENS = Range(
    0, _TOKEN_LIMIT, integer=True, unit="tokens", why="at most 2**24: beyond any model's positions"
)
BATCH = Range(1, 2**16, integer=True, unit="sequences", why="at most 65536 per GPU")
REQUESTS = Range(1, 100_000, integer=True, unit="requests", why="at most 100000 per simulation")
LAYERS = Range(1, 1024, integer=True, unit="decoder layers")
SAMPLES = Range(1, 1_000_000, integer=True, unit="samples")
TRIALS = Range(1, 1_000_000, integer=True, unit="trials")
COUNT = Range(0, 2**31 - 1, integer=True)
SECONDS = Range(0, 1e9, lo_open=True, unit="seconds")
SECONDS_OR_ZERO = Range(0, 1e9, unit="seconds")
MILLISECONDS = Range(0, 1e12, lo_open=True, unit="milliseconds")
RATE_PER_S = Range(0, 1e9, lo_open=True, unit="per second")
FRACTION = Range(0, 1, lo_open=True)
OPEN_FRACTION = Range(0, 1, lo_open=True, hi_open=True)
COSINE = Range(-1, 1, unit="a cosine similarity")
STANDARD_DEVIATION = Range(0, 100, unit="a standard deviation")
USD_PER_HOUR = Range(0, 1e9, lo_open=True, unit="US dollars per hour")
SYNTHETIC_STEPS = Range(
    1, 16384, integer=True, unit="steps", why="at most 16384 drawn per sequence; replays cycle"
)
SYNTHETIC_SEQS = Range(1, 64, integer=True, unit="sequences", why="at most 64 drawn")
SYNTHETIC_PAGES = Range(1, 2**20, integer=True, unit="pages")
