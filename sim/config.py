"""What to simulate: the target model, workload, hardware profile, method and its knobs.

Budget convention (docs/contracts.md): `budget_tokens` counts sink and window. Selected pages per KV
head = (budget_tokens - sink_tokens - window_tokens) / page_size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.errors import SimInputError
from sim.software import DEFAULT_SOFTWARE

__all__ = ["SimConfig", "IMPLEMENTATIONS"]

IMPLEMENTATIONS = ("as-published", "ideal")


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SimInputError(f"SimConfig.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class SimConfig:
    """One simulated configuration.

    model: registry name (traces.models.MODELS). hardware: profile name or YAML path (sim.hardware).
    method: a name in sim.methods.METHODS. batch_size: sequences decoded together.
    input_tokens / output_tokens: prompt length and generated tokens per sequence.
    page_size, budget_tokens, sink_tokens, window_tokens: retrieval knobs (budget counts sink + window).
    tau: correction threshold; None keeps the corrections recorded in the trace, a number recomputes
        them from the recorded similarities (real traces only).
    dense_layers: layers kept dense (full KV on GPU, no selection); the official runtime compresses
        every layer, so the default is none.
    dtype_bytes: bytes per KV / weight element (bf16: 2).
    method_options: method-specific knobs (see each method's docstring).
    hardware_overrides: dotted profile fields to replace, e.g. {"link.h2d_effective_gbps": 10.0}.
    software: software profile name or YAML path (sim.software): host-side costs of the software stack.
    implementation: "as-published" (each method priced as its public code runs it, with the software
        profile's costs) or "ideal" (the same algorithm at hardware limits, no software costs).
    software_overrides: software profile fields to replace (seconds), e.g. {"stream_sync_s": 2e-5}.
    transplant_method: replay a trace recorded by another runtime policy than the one this method
        models (`Method.replays`); refused unless True, and labelled in every output when used.
    """

    model: str
    hardware: str
    method: str = "freekv"
    batch_size: int = 1
    input_tokens: int = 600
    output_tokens: int = 16384
    page_size: int = 32
    budget_tokens: int = 2048
    sink_tokens: int = 512
    window_tokens: int = 512
    tau: float | None = None
    dense_layers: tuple[int, ...] = ()
    dtype_bytes: int = 2
    method_options: dict[str, Any] = field(default_factory=dict)
    hardware_overrides: dict[str, Any] = field(default_factory=dict)
    software: str = DEFAULT_SOFTWARE
    implementation: str = "as-published"
    software_overrides: dict[str, Any] = field(default_factory=dict)
    transplant_method: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "input_tokens", "output_tokens", "page_size", "dtype_bytes"):
            _positive_int(name, getattr(self, name))
        p = self.page_size
        for name in ("sink_tokens", "window_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0 or value % p:
                raise SimInputError(
                    f"SimConfig.{name} must be a non-negative multiple of page_size={p}, got {value!r}"
                )
        if self.window_tokens < p:
            raise SimInputError(
                f"SimConfig.window_tokens must hold at least one page (>= page_size={p}), "
                f"got {self.window_tokens}"
            )
        least = self.sink_tokens + self.window_tokens + p
        if not isinstance(self.budget_tokens, int) or self.budget_tokens < least or self.budget_tokens % p:
            raise SimInputError(
                "SimConfig.budget_tokens counts sink and window and must be a multiple of "
                f"page_size={p} of at least sink_tokens + window_tokens + page_size = {least}, "
                f"got {self.budget_tokens!r}"
            )
        if self.tau is not None and not (-1.0 <= float(self.tau) <= 1.0):
            raise SimInputError(
                f"SimConfig.tau must be None or a cosine threshold in [-1, 1], got {self.tau}"
            )
        if self.implementation not in IMPLEMENTATIONS:
            raise SimInputError(
                f"SimConfig.implementation must be one of {', '.join(IMPLEMENTATIONS)}, "
                f"got {self.implementation!r}"
            )
        if not isinstance(self.software, str) or not self.software.strip():
            raise SimInputError(
                f"SimConfig.software must be a software profile name or path, got {self.software!r}"
            )
        if not isinstance(self.transplant_method, bool):
            raise SimInputError(
                f"SimConfig.transplant_method must be true or false, got {self.transplant_method!r}"
            )
        object.__setattr__(self, "dense_layers", tuple(sorted({int(x) for x in self.dense_layers})))
        if any(x < 0 for x in self.dense_layers):
            raise SimInputError(f"SimConfig.dense_layers must be layer indices >= 0, got {self.dense_layers}")

    @property
    def selected_tokens(self) -> int:
        """Budget left to selection per KV head and sequence: budget_tokens less sink and window (> 0)."""
        return self.budget_tokens - self.sink_tokens - self.window_tokens

    @property
    def selected_pages(self) -> int:
        """Pages chosen by selection per KV head and sequence (sink and window excluded)."""
        return self.selected_tokens // self.page_size

    @property
    def max_context_tokens(self) -> int:
        """Context of the last decode step (prompt + all generated tokens)."""
        return self.input_tokens + self.output_tokens

    def replace(self, **changes: Any) -> SimConfig:
        data = self.to_dict()
        data.update(changes)
        data["dense_layers"] = tuple(data["dense_layers"])
        return SimConfig(**data)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dense_layers"] = list(self.dense_layers)
        return d
