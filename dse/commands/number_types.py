"""Click parameter types for numeric flags, each checked against a `traces.numbers.Range`.

    @click.option("--seed", type=number(SEED), default=0)      # refuses -1, 2**32, 1.5, nan
    @click.option("--slo-ms", type=number(MILLISECONDS))        # refuses nan, inf, 0, -3

click's own `int`, `float`, `IntRange` and `FloatRange` let NaN and infinity through (NaN compares false
with every bound) and have no upper bound; every numeric flag of `dse` uses `number(...)` instead, so a
flag is refused exactly as the same value in a study file or a profile would be (the wording and ranges
of traces.numbers), with click's usual "Invalid value for '--flag'" and exit status 2.
"""

from __future__ import annotations

from typing import Any

import click

from traces.numbers import Range, text_to_number

__all__ = ["NumberType", "number"]


class NumberType(click.ParamType):
    """A flag's value: a number inside `bound` (an int for integer ranges, else a float)."""

    def __init__(self, bound: Range) -> None:
        self.bound = bound
        self.name = "integer" if bound.integer else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            parsed = text_to_number(value, integer=self.bound.integer)
            if parsed is None:
                self.fail(f"must be {self.bound.describe()}, got {value!r}", param, ctx)
            value = parsed
        detail = self.bound.problem(value)
        if detail is not None:
            self.fail(detail, param, ctx)
        return int(value) if self.bound.integer else float(value)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "INTEGER" if self.bound.integer else "NUMBER"


def number(bound: Range) -> NumberType:
    """The click type of a flag whose value must lie in `bound`."""
    return NumberType(bound)
