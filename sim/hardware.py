"""Hardware profiles: the GPU, the host link and the host, every number with its source.

A profile is a YAML file: shipped ones in `sim/profiles/<name>.yaml`, user ones as `<name>.yaml` in any
directory listed in the environment variable `FREEKV_DSE_PROFILES` (several separated by `os.pathsep`; a
user file shadows a shipped one of the same name). Every number is written
`{value: <number>, source: "<datasheet/benchmark>"}` or `{value: <number>, calibrated: "<measurement>"}`;
a number without either is an error. The file is validated with pydantic (sim/hardware_file.py) and
loaded into frozen dataclasses (sim/hardware_specs.py, sim/hardware_profile.py); this module finds and
loads profile files. See docs/hardware.md for the field reference and how to add a profile.

Units: bandwidths in GB/s (1e9 bytes/s), times in seconds, memory in bytes, compute in TFLOP/s.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from sim.hardware_profile import HardwareError, HardwareProfile, build_profile
from sim.hardware_specs import GpuSpec, HostLinkSpec, HostSpec
from sim.yaml_io import FileReadError, load_yaml, read_text_file

__all__ = [
    "GpuSpec",
    "HostLinkSpec",
    "HostSpec",
    "HardwareProfile",
    "HardwareError",
    "load_profile",
    "list_profiles",
    "profile_dirs",
    "find_profile_file",
    "missing_profile_dirs",
    "PROFILES_ENV",
]

PROFILES_ENV = "FREEKV_DSE_PROFILES"
_SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"


def profile_dirs() -> list[Path]:
    """Directories searched for `<name>.yaml`, highest priority first: $FREEKV_DSE_PROFILES, then shipped."""
    user = [Path(p).expanduser() for p in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if p.strip()]
    return [*user, _SHIPPED_DIR]


def missing_profile_dirs() -> list[Path]:
    """Directories named in $FREEKV_DSE_PROFILES that do not exist (or are not directories)."""
    return [d for d in profile_dirs() if not d.is_dir()]


def _scan() -> tuple[dict[str, Path], dict[str, str]]:
    """({name: file} of every profile, {name: why it is ambiguous}). A name present as both NAME.yaml and
    NAME.yml in one directory is ambiguous (which one is meant?); a higher-priority directory may still
    define the name unambiguously and then wins."""
    found: dict[str, Path] = {}
    conflicts: dict[str, str] = {}
    for directory in reversed(profile_dirs()):  # later (higher priority) entries overwrite
        if not directory.is_dir():
            continue
        here: dict[str, list[Path]] = {}
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            here.setdefault(path.stem, []).append(path)
        for name, paths in here.items():
            if len(paths) > 1:
                found.pop(name, None)
                conflicts[name] = (
                    f"hardware profile {name!r} is defined twice in {directory}: "
                    f"{' and '.join(p.name for p in paths)}; keep one of them"
                )
            else:
                found[name] = paths[0]
                conflicts.pop(name, None)
    return found, conflicts


def _profile_files() -> dict[str, Path]:
    return _scan()[0]


def find_profile_file(name: str) -> Path | None:
    """The YAML file that `load_profile(name)` would read, or None if no directory has it."""
    return _profile_files().get(name)


def list_profiles() -> list[str]:
    """Names of every profile found (shipped and user directories; ambiguous names too), sorted."""
    found, conflicts = _scan()
    return sorted({*found, *conflicts})


def _load_file(path: Path) -> HardwareProfile:
    try:
        raw = load_yaml(read_text_file(path, "hardware profile file"), f"hardware profile file {path}")
    except FileReadError as exc:
        raise HardwareError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise HardwareError(
            f"hardware profile {path} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    return build_profile(raw, str(path))


def load_profile(name_or_path: str | os.PathLike[str]) -> HardwareProfile:
    """Load a profile by name (see `list_profiles`) or from a YAML file path."""
    text = os.fspath(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, os.PathLike) or text.endswith((".yaml", ".yml")) or os.sep in text
    )
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.exists() and not path.is_symlink():  # other kinds of file: refused by the reader
            raise HardwareError(
                f"hardware profile file {path} does not exist; pass a YAML file or one of "
                f"the profile names: {', '.join(list_profiles())}"
            )
        return _load_file(path)
    files, conflicts = _scan()
    if text in conflicts:
        raise HardwareError(conflicts[text])
    if text not in files:
        dirs = ", ".join(str(d) + (" (does not exist)" if not d.is_dir() else "") for d in profile_dirs())
        raise HardwareError(
            f"unknown hardware profile {text!r}; available: {', '.join(sorted(files)) or 'none'} "
            f"(searched {dirs}; add a directory with ${PROFILES_ENV})"
        )
    profile = _load_file(files[text])
    if profile.name != text:
        raise HardwareError(
            f"hardware profile {files[text]}: field 'name' is {profile.name!r} but the file is "
            f"named {text!r}; they must match"
        )
    return profile
