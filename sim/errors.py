"""Errors of the simulator package."""

from __future__ import annotations

import re

__all__ = ["SimInputError"]


class SimInputError(ValueError):
    """Bad simulator input: message names the field/file and what is valid.

    field / detail (optional): the input field at fault (a SimConfig field such as "budget_tokens", or
    "method_options") and what is wrong with it, without the field's name, so that a front end can name
    the field as its user knows it (`worded`)."""

    def __init__(self, message: str, field: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.field, self.detail = field, detail

    def worded(self, names: dict[str, str]) -> str:
        """The message with the fields named as in `names` (field -> e.g. a command-line flag): the field
        at fault, and the other fields its detail mentions ("... a multiple of page_size=32"), where the
        error knows its field and `names` has it; else the message as it is."""
        if self.field is None or self.detail is None or self.field not in names:
            return str(self)
        detail = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b",
                        lambda m: names[m.group(1)], self.detail) if names else self.detail
        sep = "" if detail.startswith(":") else " "
        return f"{names[self.field]}{sep}{detail}"

    def reworded(self, names: dict[str, str]) -> SimInputError:
        """This error again, its message `worded` with `names` (field and detail kept)."""
        return SimInputError(self.worded(names), field=self.field, detail=self.detail)
