"""Calibrate a hardware profile and a software profile from a GPU microbenchmark file.

The file (written by the GPU microbenchmark suite; schema "freekv-dse-microbench/1"):

    {"schema": "freekv-dse-microbench/1",
     "machine": {"gpu": ..., "driver": ..., "cuda": ..., "torch": ..., "host_cpu": ...},
     "software": {<SoftwareProfile field>: seconds, ...},
     "hardware": {<dotted HardwareProfile field, as `--set` uses>: value, ...},
     "tables": {"h2d_copy": [{"api": "memcpy_async|torch_copy|memcpy2d_rows|batched",
                              "bytes_per_copy": int, "copies": int, "host_s_per_copy": s,
                              "wall_s_per_copy": s, "gbps": GB/s}, ...], ...}}

Any key may be absent (not measured): a profile keeps its base number there. Summary numbers
("software", "hardware") are taken as they are; where the summary lacks a copy-issue cost, it is derived
from the "h2d_copy" table: the median `host_s_per_copy` of the rows of one API (memcpy_async ->
memcpy_async_call_s, memcpy2d_rows -> memcpy2d_async_call_s, torch_copy -> torch_copy_call_s), and for
"batched" a least-squares line host_s_per_copy * copies = call + copies * per_copy over rows with at
least two batch sizes. Every changed number's source says "calibrated from FILE (machine), table T".
Nothing here is fitted to an end-to-end latency.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.errors import SimInputError
from sim.hardware import HardwareProfile, load_profile
from sim.software import DEFAULT_SOFTWARE, SOFTWARE_FIELDS, SoftwareProfile, load_software
from traces.atomic_write import atomic_write_text
from traces.safe_load import load_user_json
from traces.user_files import UserFileError

__all__ = ["SCHEMA", "MicrobenchCalibration", "calibrate_microbench", "load_microbench"]

SCHEMA = "freekv-dse-microbench/1"
_API_FIELDS = {
    "memcpy_async": "memcpy_async_call_s",
    "memcpy2d_rows": "memcpy2d_async_call_s",
    "torch_copy": "torch_copy_call_s",
}
_APIS = (*_API_FIELDS, "batched")


@dataclass(frozen=True)
class MicrobenchCalibration:
    """The calibrated profiles and what changed: key -> (old, new, origin)."""

    hardware: HardwareProfile
    software: SoftwareProfile
    changed: dict[str, tuple[Any, Any, str]]
    notes: tuple[str, ...]

    def write(self, out_dir: str | PathLike[str]) -> tuple[Path, Path]:
        """Write `<out_dir>/<hardware>.yaml` and `<out_dir>/software/<software>.yaml` (a directory usable
        in FREEKV_DSE_PROFILES as it is). Returns both paths."""
        out = Path(out_dir)
        hw = out / f"{self.hardware.name}.yaml"
        sw = out / "software" / f"{self.software.name}.yaml"
        for path, what in ((hw, "hardware"), (sw, "software")):  # names are checked; this is the guarantee
            if not path.resolve().is_relative_to(out.resolve()):
                raise SimInputError(f"--out {out}: the {what} profile's name would write {path}, outside "
                                    f"{out}; profile names must be plain file names")
        (out / "software").mkdir(parents=True, exist_ok=True)
        atomic_write_text(hw, yaml.safe_dump(self.hardware.to_dict(), sort_keys=False))
        doc = {"kind": "software", **self.software.to_dict()}
        for key in SOFTWARE_FIELDS:
            text = self.software.sources.get(key, "")
            if text.startswith("calibrated: "):
                doc[key] = {"value": doc[key]["value"], "calibrated": text.removeprefix("calibrated: ")}
        atomic_write_text(sw, yaml.safe_dump(doc, sort_keys=False))
        return hw, sw

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware.name,
            "software": self.software.name,
            "changed": {k: {"before": a, "after": b, "origin": o} for k, (a, b, o) in self.changed.items()},
            "notes": list(self.notes),
        }


def _err(path: Path, msg: str) -> SimInputError:
    return SimInputError(f"microbenchmark file {path}: {msg}")


def load_microbench(path: str | PathLike[str]) -> dict[str, Any]:
    """Read and check the file's shape; errors name the file and the key."""
    p = Path(path)
    try:
        data = load_user_json(p, "microbenchmark file")
    except UserFileError as exc:
        raise SimInputError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise _err(p, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise _err(p, f"'schema' must be {SCHEMA!r}, got {got!r}")
    for key in ("machine", "software", "hardware", "tables"):
        if not isinstance(data.get(key, {}), dict):
            raise _err(p, f"'{key}' must be a mapping, got {type(data[key]).__name__}")
    unknown = sorted(set(data.get("software", {})) - set(SOFTWARE_FIELDS))
    if unknown:
        raise _err(p, f"unknown software field(s) {unknown}; valid: {', '.join(SOFTWARE_FIELDS)}")
    for key, value in data.get("software", {}).items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise _err(p, f"software.{key} must be a number of seconds >= 0, got {value!r}")
    for name, rows in data.get("tables", {}).items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise _err(p, f"tables.{name} must be a list of rows (mappings)")
    for i, row in enumerate(data.get("tables", {}).get("h2d_copy", [])):
        if row.get("api") not in _APIS:
            raise _err(
                p, f"tables.h2d_copy[{i}].api must be one of {', '.join(_APIS)}, got {row.get('api')!r}"
            )
        for key in ("copies", "host_s_per_copy"):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise _err(p, f"tables.h2d_copy[{i}].{key} must be a number >= 0, got {value!r}")
    return data


def _machine(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    parts = [f"{k} {m[k]}" for k in ("gpu", "driver", "cuda", "torch", "host_cpu") if m.get(k)]
    return ", ".join(parts) or "machine not stated"


def _from_tables(data: dict[str, Any], notes: list[str]) -> dict[str, tuple[float, str]]:
    """Software fields derived from tables.h2d_copy: field -> (seconds, table description)."""
    rows = data.get("tables", {}).get("h2d_copy", [])
    out: dict[str, tuple[float, str]] = {}
    for api, field in _API_FIELDS.items():
        vals = [float(r["host_s_per_copy"]) for r in rows if r["api"] == api]
        if vals:
            out[field] = (float(np.median(vals)), f"h2d_copy (api {api}, median of {len(vals)} rows)")
    batched = [
        (float(r["copies"]), float(r["host_s_per_copy"]) * float(r["copies"]))
        for r in rows
        if r["api"] == "batched"
    ]
    if len({c for c, _ in batched}) >= 2:
        x = np.array([c for c, _ in batched])
        y = np.array([t for _, t in batched])
        per, call = np.polyfit(x, y, 1)
        where = f"h2d_copy (api batched, line fit over {len(batched)} rows)"
        out["batched_copy_call_s"] = (max(0.0, float(call)), where)
        out["batched_copy_per_copy_s"] = (max(0.0, float(per)), where)
    elif batched:
        notes.append(
            "tables.h2d_copy has batched rows of a single batch size: call and per-copy costs not separated"
        )
    return out


def calibrate_microbench(
    path: str | PathLike[str], hardware: str, software: str = DEFAULT_SOFTWARE
) -> MicrobenchCalibration:
    """Profiles `hardware` and `software` with the file's measured numbers (module docstring)."""
    p = Path(path)
    data = load_microbench(p)
    base_hw, base_sw = load_profile(hardware), load_software(software)
    origin = f"calibrated from {p} ({_machine(data)})"
    notes: list[str] = []
    changed: dict[str, tuple[Any, Any, str]] = {}

    sw_values: dict[str, tuple[float, str]] = _from_tables(data, notes)
    for key, value in data.get("software", {}).items():
        sw_values[key] = (float(value), "software")
    sw_sources = dict(base_sw.sources)
    for key, (value, table) in sw_values.items():
        changed[f"software.{key}"] = (getattr(base_sw, key), value, f"{origin}, table {table}")
        sw_sources[key] = f"calibrated: {origin}, table {table}"
    sw = dataclasses.replace(
        base_sw,
        name=f"{base_sw.name}-calibrated",
        description=f"{base_sw.name} calibrated from {p.name} ({_machine(data)})",
        sources=sw_sources,
        ranges={k: v for k, v in base_sw.ranges.items() if k not in sw_values},  # calibrated: no estimate
        **{k: v for k, (v, _) in sw_values.items()},
    )

    hw_values = dict(data.get("hardware", {}))
    try:
        hw = base_hw.with_overrides(hw_values) if hw_values else base_hw
    except SimInputError as exc:
        raise _err(p, f"section 'hardware': {exc}") from None
    hw_sources = dict(hw.sources)
    for key in hw_values:
        part, _, name = key.partition(".")
        before = getattr(getattr(base_hw, part), name)
        after = getattr(getattr(hw, part), name)
        changed[key] = (before, after, f"{origin}, table hardware")
        hw_sources[key] = f"calibrated: {origin}, table hardware"
    hw = dataclasses.replace(
        hw,
        name=f"{base_hw.name}-calibrated",
        description=f"{base_hw.name} calibrated from {p.name} ({_machine(data)})",
        sources=hw_sources,
    )
    if not changed:
        notes.append("the file measured nothing these profiles use: both are copies of their bases")
    return MicrobenchCalibration(hardware=hw, software=sw, changed=changed, notes=tuple(notes))
