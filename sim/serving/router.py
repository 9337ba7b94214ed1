"""Routers in front of a pool of replicas: which replica a request (or, disaggregated, a prefilled KV
cache) goes to, decided when it arrives.

- `round-robin`: the next replica in turn (microsoft/vidur
  vidur/scheduler/global_scheduler/round_robin_global_scheduler.py:12-22);
- `least-loaded`: the replica with the fewest outstanding requests (routed there and not finished),
  the lowest index on a tie (Vidur's LOR scheduler, vidur/scheduler/global_scheduler/
  lor_global_scheduler.py:12-30).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sim.errors import SimInputError

__all__ = ["ROUTERS", "Router", "check_router"]

ROUTERS = ("round-robin", "least-loaded")


class Loaded(Protocol):
    load: int  # outstanding requests: routed here and not finished (prefill workers: not prefilled)


def check_router(name: str, flag: str = "--router") -> str:
    if name not in ROUTERS:
        raise SimInputError(f"{flag}: unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    return name


class Router:
    def __init__(self, kind: str, targets: Sequence[Loaded]) -> None:
        self.kind, self.targets, self._next = check_router(kind), targets, 0

    def pick(self) -> int:
        if self.kind == "round-robin":
            k = self._next % len(self.targets)
            self._next += 1
            return k
        loads = [t.load for t in self.targets]
        return loads.index(min(loads))
