"""A hardware profile as loaded (`HardwareProfile`: GPU, host link, host and the source of every
number), its YAML form (`to_dict`), overrides of dotted fields, and building one from a parsed file.

Finding and loading profile files: sim/hardware.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import ValidationError

from sim.errors import SimInputError
from sim.hardware_file import ProfileFile, describe_errors, section_values
from sim.hardware_specs import GpuSpec, HostLinkSpec, HostSpec

__all__ = ["HardwareError", "HardwareProfile", "build_profile"]


class HardwareError(SimInputError):
    """A hardware profile that cannot be found or is invalid; the message names the file and field."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpu: GpuSpec
    link: HostLinkSpec
    host: HostSpec
    sources: dict[str, str] = field(default_factory=dict)  # dotted field -> source or "calibrated: ..."

    def to_dict(self) -> dict[str, Any]:
        """The YAML form: numbers as {value, source} or {value, calibrated}; JSON-able."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        for part in ("gpu", "link", "host"):
            spec = getattr(self, part)
            section: dict[str, Any] = {}
            for f in fields(spec):
                value = getattr(spec, f.name)
                dotted = f"{part}.{f.name}"
                if value is None:  # an optional field the profile leaves out
                    continue
                if dotted not in self.sources:
                    section[f.name] = value
                    continue
                if isinstance(value, tuple):
                    value = [list(p) for p in value]
                text = self.sources[dotted]
                key = "calibrated" if text.startswith("calibrated: ") else "source"
                section[f.name] = {"value": value, key: text.removeprefix("calibrated: ")}
            out[part] = section
        return out

    def with_overrides(self, overrides: Mapping[str, Any] | None = None, /, **dotted: Any) -> HardwareProfile:
        """A copy with dotted fields replaced, validated like a file: `{"link.h2d_effective_gbps": 10}`.

        The source of an overridden number becomes "override (was <old value>: <old source>)".
        """
        changes = {**(overrides or {}), **dotted}
        raw = self.to_dict()
        for key, value in changes.items():
            part, _, name = key.partition(".")
            known = part in ("gpu", "link", "host") and name in {f.name for f in fields(getattr(self, part))}
            if not known:
                valid = sorted(
                    f"{p}.{f.name}" for p in ("gpu", "link", "host") for f in fields(getattr(self, p))
                )
                raise HardwareError(
                    f"hardware override {key!r} on profile {self.name!r}: unknown field; "
                    f"valid: {', '.join(valid)}"
                )
            old = raw[part].get(name)
            if old is None:  # an optional field the profile leaves out
                raw[part][name] = {"value": value, "source": "override (the profile does not give it)"}
            elif isinstance(old, dict):
                was = old.get("source") or f"calibrated: {old.get('calibrated')}"
                raw[part][name] = {"value": value, "source": f"override (was {old['value']}: {was})"}
            else:
                raw[part][name] = value
        return build_profile(raw, f"{self.name} with overrides {sorted(changes)}")


def build_profile(raw: object, origin: str) -> HardwareProfile:
    """A profile from a parsed YAML file (or to_dict form); HardwareError naming `origin` and the field."""
    if not isinstance(raw, dict):
        raise HardwareError(
            f"hardware profile {origin}: the file must be a YAML mapping with keys "
            f"name, description, gpu, link, host; got {type(raw).__name__}"
        )
    try:
        parsed = ProfileFile.model_validate(raw)
    except ValidationError as exc:
        raise HardwareError(
            f"hardware profile {origin} is invalid: {describe_errors(exc)}. "
            "See docs/hardware.md for the field reference."
        ) from None
    sources: dict[str, str] = {}
    built: dict[str, Any] = {}
    for part, cls in (("gpu", GpuSpec), ("link", HostLinkSpec), ("host", HostSpec)):
        values, origins = section_values(getattr(parsed, part), [f.name for f in fields(cls)])
        built[part] = cls(**values)
        sources.update({f"{part}.{name}": text for name, text in origins.items()})
    return HardwareProfile(name=parsed.name, description=parsed.description, sources=sources, **built)
