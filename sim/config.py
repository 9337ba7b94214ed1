"""What to simulate: the target model, workload, hardware profile, method and its knobs.

`SimConfig` extends `traces.retrieval_knobs.RetrievalKnobs` (page size, budget counting sink and window,
sink, window, dense layers: the budget convention's one validation, `fits_budget`, selected pages).
`method` is a catalogue entry with a simulator model (traces.catalogue); `method_options` its knobs the
simulator reads (checked by `sim.methods.get_method` against the entry's knobs dataclass).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.errors import SimInputError
from sim.software import DEFAULT_SOFTWARE
from traces.numbers import BATCH, TOKENS
from traces.retrieval_knobs import RetrievalKnobs

__all__ = ["SimConfig", "IMPLEMENTATIONS", "DEFAULT_GPU_MEMORY_UTILIZATION"]

IMPLEMENTATIONS = ("as-published", "ideal")
# vLLM's default share of GPU memory an engine fills (EngineArgs.gpu_memory_utilization = 0.90 in
# vllm/engine/arg_utils.py; CacheConfig.gpu_memory_utilization in later releases); SGLang's
# --mem-fraction-static plays the same role
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True, kw_only=True)
class SimConfig(RetrievalKnobs):
    """One simulated configuration.

    model: registry name (traces.models.MODELS). hardware: profile name or YAML path (sim.hardware).
    method: a catalogue method with a simulator model (sim.methods.method_names()). batch_size: sequences
    decoded together.
    input_tokens / output_tokens: prompt length and generated tokens per sequence.
    page_size, budget_tokens, sink_tokens, window_tokens: retrieval knobs (budget counts sink + window).
    tau: correction threshold; None keeps the corrections recorded in the trace, a number recomputes
        them from the recorded similarities (real traces only).
    dense_layers: layers kept dense (full KV on GPU, no selection); the official runtime compresses
        every layer, so the default is none.
    dtype_bytes: bytes per KV / weight element (bf16: 2).
    method_options: the method's knobs the simulator reads (traces.catalogue; `dse methods` lists them).
    hardware_overrides: dotted profile fields to replace, e.g. {"link.h2d_effective_gbps": 10.0}.
    software: software profile name or YAML path (sim.software): host-side costs of the software stack.
    implementation: "as-published" (each method priced as its public code runs it, with the software
        profile's costs) or "ideal" (the same algorithm at hardware limits, no software costs).
    software_overrides: software profile fields to replace (seconds), e.g. {"stream_sync_s": 2e-5}.
    transplant_method: replay a trace recorded by another runtime policy than the one this method
        models (`Method.replays`); refused unless True, and labelled in every output when used.
    gpu_memory_utilization: share of the GPU's memory the engine may fill with weights, activations and KV
        (sim.memory; vLLM's --gpu-memory-utilization, default 0.9), the rest kept as headroom.
    """

    model: str
    hardware: str
    method: str = "freekv"
    batch_size: int = 1
    input_tokens: int = 600
    output_tokens: int = 16384
    tau: float | None = None
    dense_layers: tuple[int, ...] = ()
    dtype_bytes: int = 2
    method_options: dict[str, Any] = field(default_factory=dict)
    hardware_overrides: dict[str, Any] = field(default_factory=dict)
    software: str = DEFAULT_SOFTWARE
    implementation: str = "as-published"
    software_overrides: dict[str, Any] = field(default_factory=dict)
    transplant_method: bool = False
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION

    _knob_prefix = "SimConfig."
    _knob_error = SimInputError

    def __post_init__(self) -> None:
        for name in ("batch_size", "input_tokens", "output_tokens", "dtype_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise self._refuse(name, f"must be a positive integer, got {value!r}")
        for name, bound in (("batch_size", BATCH), ("input_tokens", TOKENS), ("output_tokens", TOKENS)):
            too_large = bound.problem(getattr(self, name))
            if too_large is not None:
                raise self._refuse(name, too_large)
        super().__post_init__()
        if self.tau is not None and not (-1.0 <= float(self.tau) <= 1.0):
            raise self._refuse("tau", f"must be None or a cosine threshold in [-1, 1], got {self.tau}")
        if self.implementation not in IMPLEMENTATIONS:
            raise self._refuse("implementation", f"must be one of {', '.join(IMPLEMENTATIONS)}, "
                                                 f"got {self.implementation!r}")
        if not isinstance(self.software, str) or not self.software.strip():
            raise self._refuse("software", f"must be a software profile name or path, got {self.software!r}")
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0.0 < util <= 1.0:
            raise self._refuse("gpu_memory_utilization",
                               f"must be a share of GPU memory in (0, 1], got {util!r}")
        if not isinstance(self.transplant_method, bool):
            raise self._refuse("transplant_method", f"must be true or false, got {self.transplant_method!r}")

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
