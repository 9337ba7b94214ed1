"""Checking what a study database holds before a report reads it: the user attributes `dse sweep` writes
(docs/contracts.md, "Study results") must have the types it writes.

A database is a file the user can edit (or an older or foreign tool can write). A trial whose stored
attributes have the wrong type (a `config` that is a string, a latency that is text, a `feasible` that is
a number) is left out of the report with a warning naming the trial and the attribute; study-level
attributes that are wrong stop the report with one message naming the attribute, since without them no
trial can be read.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["trial_attr_problem", "study_attr_problem", "baseline_attr_problem"]


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _is_finite_or_none(x: Any) -> bool:
    return x is None or (_is_number(x) and not (isinstance(x, float) and math.isinf(x)))


def _dict_of(value: Any, check: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and check(v) for k, v in value.items())


def _list_of_mappings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, dict) for x in value)


def _sim_result_problem(res: Any, where: str) -> str | None:
    """A SimResult.to_dict() as the report reads it."""
    if not isinstance(res, dict):
        return f"{where} is a {type(res).__name__}, not a mapping"
    lat = res.get("per_token_latency_s")
    if lat is not None and not _dict_of(lat, _is_finite_or_none):
        return f"{where}.per_token_latency_s is not a mapping of numbers"
    for key in ("throughput_tokens_per_s",):
        if not _is_finite_or_none(res.get(key)):
            return f"{where}.{key} is {res.get(key)!r}, not a number"
    if "memory" in res and not isinstance(res["memory"], dict):
        return f"{where}.memory is not a mapping"
    if "oom" in res and not isinstance(res["oom"], bool | None):
        return f"{where}.oom is {res['oom']!r}, not true/false"
    return None


def _replays_problem(ua: dict[str, Any]) -> str | None:
    sim = ua.get("sim", {})
    if not isinstance(sim, dict):
        return f"'sim' is a {type(sim).__name__}, not a mapping of hardware profiles"
    for hw, res in sim.items():
        if (problem := _sim_result_problem(res, f"sim[{hw!r}]")) is not None:
            return problem
    models = ua.get("sim_models", {})
    if not _dict_of(models, lambda v: isinstance(v, dict)):
        return "'sim_models' is not a mapping of models to hardware profiles"
    for model, per_hw in models.items():
        for hw, res in per_hw.items():
            if (problem := _sim_result_problem(res, f"sim_models[{model!r}][{hw!r}]")) is not None:
                return problem
    grid = ua.get("sim_grid", [])
    if not isinstance(grid, list) or not all(isinstance(g, dict) for g in grid):
        return "'sim_grid' is not a list of mappings"
    for i, g in enumerate(grid):
        if "result" in g and (problem := _sim_result_problem(g["result"], f"sim_grid[{i}].result")):
            return problem
    return None


_INTERVAL_KEYS = ("value", "low", "high")
_MAPPINGS = ("config", "accuracy_ci", "trace_dirs", "trace_summary", "worker")


def _common_problem(ua: dict[str, Any]) -> str | None:
    for key in _MAPPINGS:
        if key in ua and ua[key] is not None and not isinstance(ua[key], dict):
            return f"'{key}' is {ua[key]!r}, not a mapping"
    for key in ("accuracy", "dense_accuracy"):
        if key in ua and not _dict_of(ua[key], _is_finite_or_none):
            return f"'{key}' is {ua[key]!r}, not a mapping of metric names to numbers"
    samples = ua.get("accuracy_samples")
    if samples and not _dict_of(samples, _list_of_mappings):
        return "'accuracy_samples' is not a mapping of metric names to lists of per-prompt results"
    for key, ci in (ua.get("accuracy_ci") or {}).items():
        if not isinstance(ci, dict) or not all(_is_finite_or_none(ci.get(k)) for k in _INTERVAL_KEYS):
            return f"'accuracy_ci[{key!r}]' is {ci!r}, not an interval (value, low, high: numbers)"
    if "trace_dir" in ua and not isinstance(ua["trace_dir"], str | None):
        return f"'trace_dir' is {ua['trace_dir']!r}, not a path"
    return _replays_problem(ua)


def trial_attr_problem(user_attrs: dict[str, Any], values: Any = None) -> str | None:
    """What is wrong with one trial's stored user attributes (the first problem found), or None."""
    if (problem := _common_problem(user_attrs)) is not None:
        return problem
    if "constraints" in user_attrs and not _dict_of(user_attrs["constraints"], _is_number):
        return f"'constraints' is {user_attrs['constraints']!r}, not a mapping of names to numbers"
    for key, ok in (
        ("feasible", lambda v: isinstance(v, bool | None)),
        ("duplicate_of", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))),
        ("error", lambda v: isinstance(v, str | None)),
        ("interrupted", lambda v: isinstance(v, str | None)),
        ("skipped", lambda v: isinstance(v, str | None)),
        ("wall_s", _is_finite_or_none),
    ):
        if key in user_attrs and not ok(user_attrs[key]):
            return f"'{key}' is {user_attrs[key]!r} ({type(user_attrs[key]).__name__})"
    if values is not None and not all(_is_number(v) for v in values):
        return f"the objective values {list(values)!r} are not all numbers"
    return None


def baseline_attr_problem(data: Any) -> str | None:
    """What is wrong with a stored baseline (study attribute `dense`, `untuned_<method>`), or None."""
    if not isinstance(data, dict):
        return f"it is {data!r}, not a mapping"
    return _common_problem(data)


def study_attr_problem(attrs: dict[str, Any]) -> str | None:
    """What is wrong with the study-level attributes a report needs, or None."""
    config = attrs.get("study_config", {})
    if not isinstance(config, dict):
        return f"'study_config' is {config!r}, not a mapping"
    if not isinstance(config.get("hardware", []), list) or not all(
        isinstance(h, str) for h in config.get("hardware", [])
    ):
        return f"'study_config.hardware' is {config.get('hardware')!r}, not a list of profile names"
    for key in ("workload", "model", "search", "slo", "constraints"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            return f"'study_config.{key}' is {config[key]!r}, not a mapping"
    names = attrs.get("objective_names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        return f"'objective_names' is {names!r}, not a list of names"
    if not isinstance(attrs.get("study_file", ""), str):
        return "'study_file' is not text"
    return None
