"""Software profiles: what the host software stack costs per operation, every number with its source.

A hardware profile (sim/hardware.py) says what the GPU, the link and the host can do; a software
profile says what one framework/driver stack costs on the host thread to drive them: an eager PyTorch
op, a kernel launch from C++, one copy call per API path, a stream sync, a read-back, a hand-off to a
worker thread. The two compose freely: `SimConfig(hardware="h100-pcie5", software="pytorch2-cuda12")`.

Files: shipped ones in `sim/software_profiles/<name>.yaml`; user ones as `<name>.yaml` in a `software/`
subfolder of any directory listed in `FREEKV_DSE_PROFILES` (the hardware profiles' variable; a user
file shadows a shipped one of the same name). A file is flat: `name`, `description`, and every field
of `SoftwareProfile` written `{value: <seconds>, source: "<reference>"}` or
`{value: <seconds>, calibrated: "<measurement>"}`; "estimate: <reasoning>" in a source says how a
number was derived where no public measurement exists, and such an entry states the range the number
could take, `range: [<low>, <high>]` (seconds, low <= value <= high; `estimate_ends` moves every ranged
field to one end together). Times in seconds, all >= 0.

Method models use these numbers only in the "as-published" implementation mode (SimConfig.implementation);
the "ideal" mode charges none of them (docs/hardware.md, "Software profiles").
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from sim.errors import SimInputError
from sim.hardware import PROFILES_ENV
from sim.yaml_io import FileReadError, load_yaml, read_text_file

__all__ = [
    "SoftwareProfile",
    "SoftwareError",
    "SOFTWARE_FIELDS",
    "DEFAULT_SOFTWARE",
    "load_software",
    "list_software",
    "software_dirs",
    "find_software_file",
    "estimate_ends",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a name that is a plain file name, as hardware's

DEFAULT_SOFTWARE = "pytorch2-cuda12"
_SHIPPED_DIR = Path(__file__).resolve().parent / "software_profiles"

# field -> what it measures (shown by `dse hardware software`, and in error messages)
SOFTWARE_FIELDS: dict[str, str] = {
    "torch_op_dispatch_s": "eager PyTorch op that launches one kernel: Python + ATen dispatch + launch",
    "cpp_kernel_launch_s": "one cudaLaunchKernel (or <<<>>>) issued from C++",
    "python_op_s": "one Python-level call into an extension / one small Python loop iteration",
    "memcpy_async_call_s": "host time of one cudaMemcpyAsync (pinned host memory)",
    "memcpy2d_async_call_s": "host time of one cudaMemcpy2DAsync call (its rows are DMA work, not host)",
    "torch_copy_call_s": "host time of one torch dst.copy_(src, non_blocking=True) of a slice",
    "batched_copy_call_s": "host time of one cudaMemcpyBatchAsync call (CUDA >= 12.8)",
    "batched_copy_per_copy_s": "host time per copy inside one cudaMemcpyBatchAsync call",
    "stream_sync_s": "host cost of cudaStreamSynchronize beyond waiting for the work",
    "event_record_s": "host time of one cudaEventRecord",
    "event_sync_s": "host cost of cudaEventSynchronize beyond waiting for the event",
    "stream_wait_event_s": "host time of one cudaStreamWaitEvent",
    "readback_s": "device-to-host read-back of a small tensor (.item() / .cpu()), host side",
    "thread_handoff_s": "hand one task to a host worker thread and wake it",
    "python_layer_s": "per decoder layer Python overhead of an HF-style module forward",
    "torch_gather_row_s": "host time per scattered row (<= 256 B) gathered by torch indexing on the host",
    "host_copy_s_per_gb": "host time per GB of a contiguous host-to-host copy (memcpy / tensor.copy_)",
    "python_list_elem_s": "host time per element of a Python list turned into a tensor (torch.tensor(list))",
    "managed_page_fault_s": "one fault on cudaMallocManaged memory last touched by the other processor "
    "(the page migrates), on the side that touches it",
    "pageable_staging_s_per_gb": "host time per GB the CUDA driver spends staging a copy from pageable host "
    "memory through its pinned buffer (the calling thread waits for it)",
}


# fields added after the first profiles: a file without them takes the default shipped profile's entry
LATER_FIELDS = (
    "torch_gather_row_s", "host_copy_s_per_gb", "python_list_elem_s", "managed_page_fault_s",
    "pageable_staging_s_per_gb",
)


class SoftwareError(SimInputError):
    """A software profile that cannot be found or is invalid; the message names the file and field."""


@dataclass(frozen=True)
class SoftwareProfile:
    """Host-side costs of one software stack (seconds; see SOFTWARE_FIELDS). `sources`: field -> origin."""

    name: str
    description: str
    torch_op_dispatch_s: float
    cpp_kernel_launch_s: float
    python_op_s: float
    memcpy_async_call_s: float
    memcpy2d_async_call_s: float
    torch_copy_call_s: float
    batched_copy_call_s: float
    batched_copy_per_copy_s: float
    stream_sync_s: float
    event_record_s: float
    event_sync_s: float
    stream_wait_event_s: float
    readback_s: float
    thread_handoff_s: float
    python_layer_s: float
    torch_gather_row_s: float
    host_copy_s_per_gb: float
    python_list_elem_s: float
    managed_page_fault_s: float
    pageable_staging_s_per_gb: float
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """name, description and {field: {"value", "source"}} (JSON-able)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        for key in SOFTWARE_FIELDS:
            out[key] = {"value": getattr(self, key), "source": self.sources.get(key, "")}
            if key in self.ranges:
                out[key]["range"] = list(self.ranges[key])
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> SoftwareProfile:
        """A copy with fields replaced (values in seconds); unknown names are an error listing the valid."""
        changes: dict[str, Any] = {}
        sources = dict(self.sources)
        for key, value in overrides.items():
            if key not in SOFTWARE_FIELDS:
                raise SoftwareError(
                    f"software override {key!r}: unknown field; valid: {', '.join(SOFTWARE_FIELDS)}"
                )
            changes[key] = _seconds(value, f"software override {key}")
            sources[key] = f"override ({value})"
        import dataclasses

        ranges = {k: v for k, v in self.ranges.items() if k not in changes}  # an override is no estimate
        return dataclasses.replace(self, sources=sources, ranges=ranges, **changes)


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SoftwareError(f"{where}: must be a number of seconds >= 0, got {value!r}")
    try:
        out = float(value)
    except ValueError:
        raise SoftwareError(f"{where}: must be a number of seconds >= 0, got {value!r}") from None
    if not math.isfinite(out) or out < 0:
        raise SoftwareError(f"{where}: must be a finite number of seconds >= 0, got {value!r}")
    return out


def _build(raw: object, origin: str) -> SoftwareProfile:
    """Validate a parsed YAML document and build the profile; every error names `origin` and the field."""
    if not isinstance(raw, dict):
        raise SoftwareError(
            f"software profile {origin}: expected a mapping of fields, got {type(raw).__name__}"
        )
    known = {"name", "description", "kind", *SOFTWARE_FIELDS}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SoftwareError(
            f"software profile {origin}: unknown field(s) {unknown}; valid fields: name, description, "
            f"{', '.join(SOFTWARE_FIELDS)}"
        )
    if raw.get("kind", "software") != "software":
        raise SoftwareError(f"software profile {origin}: kind must be 'software', got {raw.get('kind')!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SoftwareError(f"software profile {origin}: 'name' must be a non-empty string")
    if not _NAME.fullmatch(name.strip()):
        raise SoftwareError(
            f"software profile {origin}: 'name' {name!r} must be a plain file name (letters, digits, '.', "
            "'_', '-', starting with a letter or digit; no '/' or '..'): calibration writes <name>.yaml"
        )
    raw = {**raw, **{k: _shipped_entry(k, origin) for k in LATER_FIELDS if k not in raw}}
    missing = [k for k in SOFTWARE_FIELDS if k not in raw]
    if missing:
        raise SoftwareError(
            f"software profile {origin}: missing field(s) {missing}; each is "
            "{value: <seconds>, source: \"<reference>\"} (docs/hardware.md, 'Software profiles')"
        )
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    ranges: dict[str, tuple[float, float]] = {}
    for key in SOFTWARE_FIELDS:
        entry = raw[key]
        where = f"software profile {origin}: field {key!r}"
        if not isinstance(entry, dict):
            raise SoftwareError(
                f"{where}: a bare number is not allowed; write {{value: {entry!r}, source: "
                "\"<datasheet, benchmark, paper, or 'estimate: <reasoning>'>\"} or "
                "{value: ..., calibrated: \"<measurement>\"}"
            )
        extra = sorted(set(entry) - {"value", "source", "calibrated", "range"})
        if extra:
            raise SoftwareError(f"{where}: unknown key(s) {extra}; valid: value, source, calibrated, range")
        if "value" not in entry:
            raise SoftwareError(f"{where}: missing 'value'")
        origins = [entry.get(k) for k in ("source", "calibrated") if entry.get(k) is not None]
        if len(origins) != 1 or not isinstance(origins[0], str) or not origins[0].strip():
            raise SoftwareError(
                f"{where}: needs exactly one of 'source' or 'calibrated', a non-empty string naming where "
                "the number comes from"
            )
        values[key] = _seconds(entry["value"], where)
        sources[key] = ("calibrated: " if "calibrated" in entry else "") + " ".join(origins[0].split())
        if "range" in entry:
            ranges[key] = _range(entry["range"], values[key], where)
    return SoftwareProfile(
        name=name.strip(),
        description=" ".join(str(raw.get("description", "")).split()),
        sources=sources,
        ranges=ranges,
        **values,
    )


def _shipped_entry(key: str, origin: str) -> dict[str, Any]:
    """The default shipped profile's entry for a field added after user files were written, labelled so."""
    entry = load_yaml(read_text_file(_SHIPPED_DIR / f"{DEFAULT_SOFTWARE}.yaml", "software profile file"))[key]
    return {**entry, "source": f"not in {origin}: {DEFAULT_SOFTWARE}'s value ({entry['source']})"}


def _range(raw: object, value: float, where: str) -> tuple[float, float]:
    """[low, high] seconds with low <= value <= high."""
    if not isinstance(raw, list) or len(raw) != 2:
        raise SoftwareError(f"{where}: 'range' must be [low, high] in seconds, got {raw!r}")
    low, high = (_seconds(x, f"{where} range") for x in raw)
    if not low <= value <= high:
        raise SoftwareError(f"{where}: 'range' [{low}, {high}] must contain the value {value}")
    return low, high


def software_dirs() -> list[Path]:
    """Directories searched in order: `<dir>/software` for each FREEKV_DSE_PROFILES entry, then shipped."""
    user = [
        Path(p).expanduser() / "software"
        for p in os.environ.get(PROFILES_ENV, "").split(os.pathsep)
        if p.strip()
    ]
    return [*user, _SHIPPED_DIR]


def _files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in reversed(software_dirs()):  # earlier directories shadow later ones
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                out[f.stem] = f
    return out


def find_software_file(name: str) -> Path | None:
    return _files().get(name)


def list_software() -> list[str]:
    """Names of every software profile found (shipped and user), sorted."""
    return sorted(_files())


def _load_file(path: Path) -> SoftwareProfile:
    try:
        raw = load_yaml(read_text_file(path, "software profile file"), f"software profile file {path}")
    except FileReadError as exc:
        raise SoftwareError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise SoftwareError(
            f"software profile file {path}: not valid YAML ({' '.join(str(exc).split())})"
        ) from None
    return _build(raw, str(path))


def load_software(name_or_path: str | os.PathLike[str] | SoftwareProfile) -> SoftwareProfile:
    """Load a software profile by name (sim/software_profiles or $FREEKV_DSE_PROFILES/software) or path."""
    if isinstance(name_or_path, SoftwareProfile):
        return name_or_path
    text = str(name_or_path)
    path = Path(text).expanduser()
    if text.endswith((".yaml", ".yml")) or os.sep in text:
        if not path.exists() and not path.is_symlink():  # other kinds of file: refused by the reader
            raise SoftwareError(f"software profile file {path}: not found")
        return _load_file(path)
    found = find_software_file(text)
    if found is None:
        dirs = ", ".join(str(d) for d in software_dirs())
        raise SoftwareError(
            f"unknown software profile {text!r}: valid are {', '.join(list_software()) or 'none'} "
            f"(searched {dirs}; add a '<dir>/software' folder listed by ${PROFILES_ENV}, or pass a YAML path)"
        )
    return _load_file(found)


def fields_of(profile: SoftwareProfile) -> dict[str, float]:
    """{field: seconds} of a profile (the numbers only)."""
    return {f.name: getattr(profile, f.name) for f in fields(profile) if f.name in SOFTWARE_FIELDS}


def estimate_ends(profile: SoftwareProfile) -> dict[str, dict[str, float]]:
    """{"low": {field: low}, "high": {field: high}}: every field with a stated range at that end (the
    overrides that price an answer with all the profile's estimates at their cheap or dear ends)."""
    return {
        "low": {k: lo for k, (lo, _) in profile.ranges.items()},
        "high": {k: hi for k, (_, hi) in profile.ranges.items()},
    }
