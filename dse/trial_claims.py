"""Which trial measures which configuration: a trial's rank in the budget, the claim of a configuration
no other trial has taken, and the COMPLETE twin a trial copies once every configuration is taken (the
rules: dse/driver.py, "Trial budget" and "Distinct configurations")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.file_lock import exclusive
from dse.search_space import TrialConfig
from dse.sweep_storage import counts_toward_budget

__all__ = ["budget_rank", "complete_twin", "claim"]


def budget_rank(ostudy: Any, number: int) -> int:
    """The rank of trial `number` among the trials that count toward the budget (by trial number)."""
    slots = sorted(t.number for t in ostudy.get_trials(deepcopy=False) if counts_toward_budget(t))
    return slots.index(number) if number in slots else len(slots)


def complete_twin(ostudy: Any, key: str, number: int) -> Any | None:
    """A COMPLETE trial other than `number` that measured the configuration `key` itself, or None."""
    from optuna.trial import TrialState

    for t in ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        ua = t.user_attrs
        if t.number != number and ua.get("config_key") == key and ua.get("duplicate_of") is None:
            return t
    return None


def claim(ostudy: Any, trial: Any, knobs: TrialConfig, lock: Path, n_valid: int | None) -> str | None:
    """Record `knobs` on `trial` unless another trial already measured, is measuring or failed on the same
    configuration while the space still holds untaken ones (`n_valid`: their number, None: unbounded):
    then return why (redraw). Check and claim happen under the file lock `lock` that the workers of one
    machine share."""
    key = knobs.key()
    with exclusive(lock):
        taken: dict[str, Any] = {}
        for t in ostudy.get_trials(deepcopy=False):
            k = t.user_attrs.get("config_key")
            if k is not None and t.number != trial.number and counts_toward_budget(t):
                taken.setdefault(k, t)
        twin = taken.get(key)
        if twin is not None and (n_valid is None or len(taken) < n_valid):
            state = twin.state.name.lower()
            return f"duplicate: trial #{twin.number} ({state}) has this configuration; redrawn"
        trial.set_user_attr("config", knobs.to_dict())
        trial.set_user_attr("config_key", key)
    return None
