"""A replay question: which demand, on which model, profiles, methods, knobs, workload and batches.

Every field a front end may leave out has the value the simulator would take anyway; `names` says how
the user named each field (a CLI flag such as "--budget-tokens"), so that refusals and notes speak the
user's words (sim.errors.SimInputError.worded). Never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.config import DEFAULT_GPU_MEMORY_UTILIZATION, IMPLEMENTATIONS
from sim.errors import SimInputError
from sim.replay.demand_source import DemandSource
from traces.numbers import SEED

__all__ = ["Question"]


@dataclass(frozen=True)
class Question:
    """What to replay (module docstring).

    methods: simulator methods to price the demand with; empty: the demand's own (a trace's policy),
        else freekv. every_method: every method with a simulator model; those that cannot price the
        demand (another policy's trace without transplant_method, a trace of dense attention, no demand
        at all) are left out with the reason instead of refused.
    knobs: the retrieval knobs given (page_size, budget_tokens, sink_tokens, window_tokens, dense_layers,
        tau; None or absent: the trace's, else the default), sim.replay.knob_resolution.
    method_options: the methods' knobs the simulator reads (traces.catalogue).
    demand_ends: also answer at a preset's low and high ends (dse capacity, dse serve).
    trace_knobs: knobs not given take the trace's values (False: the defaults, e.g. a study trial that
        names all its knobs and keeps the recorded corrections, tau None).
    model_positions: refuse a context past the model's maximum positions (False: the model is a shape
        to price, as a study replays its trace on extra models at one workload).
    gpu_memory_utilization: share of each GPU's memory usable for weights, activations and KV (sim.memory;
        vLLM's default 0.9); stated in every answer's notes.
    rag: RAG requests (sim.replay.rag.RagRequest; input_tokens is then its prompt length): each
        multi-context method gets its documents and hit rate as simulator knobs.
    """

    model: str
    hardware: tuple[str, ...]
    demand: DemandSource = field(default_factory=DemandSource)
    methods: tuple[str, ...] = ()
    every_method: bool = False
    input_tokens: int = 600
    output_tokens: int = 16384
    batches: tuple[int, ...] = (1,)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    method_options: Mapping[str, Any] = field(default_factory=dict)
    implementations: tuple[str, ...] = ("as-published",)
    software: str | None = None
    hardware_overrides: Mapping[str, Any] = field(default_factory=dict)
    software_overrides: Mapping[str, Any] = field(default_factory=dict)
    transplant_method: bool = False
    demand_ends: bool = False
    trace_knobs: bool = True
    model_positions: bool = True
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    rag: Any = None  # sim.replay.rag.RagRequest: the multi-context methods' documents and hit rate
    seed: int = 0
    names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("hardware", "batches", "implementations"):
            if not getattr(self, name):
                raise SimInputError(f"{self.named(name)} needs at least one value")
        bad = [i for i in self.implementations if i not in IMPLEMENTATIONS]
        if bad:
            raise SimInputError(f"{self.named('implementation')} must be one of "
                                f"{', '.join(IMPLEMENTATIONS)}, got {', '.join(bad)}")
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0.0 < util <= 1.0:
            raise SimInputError(f"{self.named('gpu_memory_utilization')} must be a share of GPU memory in "
                                f"(0, 1], got {util!r}")
        if self.every_method and self.methods:
            raise SimInputError(f"{self.named('method')}: give method names or every method, not both")
        SEED.check(self.seed, self.named("seed"), SimInputError)

    def named(self, field_name: str) -> str:
        """How the user named `field_name` (its entry in `names`, else the field's name)."""
        return self.names.get(field_name, field_name)
