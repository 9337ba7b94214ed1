"""The method interface: how a KV method (FreeKV, dense, Quest, ...) describes one decode layer.

A method says three things; the engine (sim/engine.py) does all the timing:

1. `template(ctx)`: the operations of ONE layer of ONE decode step, in the order the host issues
   them (program order), each with the in-order queues (`resources`) it holds while it runs and the
   operations it waits for (`deps`). The same template serves every layer and every step.
2. `work(ctx)`: how much work each operation is at every (step, layer): a `Kernel` (GPU time, seconds)
   or a `Transfer` (a batch of host<->device copies), each with the main host thread's time to issue
   it (`host_s`). Arrays have shape (S, L) = (decode steps, layers of the target model). An operation
   happens at a layer-step when its GPU amount (seconds, copies) > 0 or its host_s > 0; otherwise it
   holds nothing and finishes as soon as the host and its dependencies are done. A Kernel with seconds
   0 and host_s > 0 is pure host work (a Python loop, a CPU gather, a hand-off): `OpSpec(resources=())`.
3. `memory(ctx)`: the GPU and host bytes it keeps (fixed and per sequence), for the memory fit.
   Optionally `prefill(ctx)`: prefill time by operation (default: dense prefill of the prompt).

Timing semantics (exactly what both engines implement; tests prove they agree on random templates):
- Every GPU resource is an in-order queue, like a CUDA stream: it serves the operations that hold it
  in program order (step by step, layer by layer, template order). An operation starts when every
  resource it holds has finished the previous operation on it, every dependency has finished, and the
  host has issued it; it holds all its resources until it ends.
- The main host thread (the "host" lane of timelines) walks the operations in program order. For each
  operation that happens it first spends the op's `host_s` (eager dispatch of its launches, Python
  glue, CPU work); the op may start only after that. A Transfer with `issuer="host"` is then issued
  copy by copy by the main thread itself (busy n_copies * issue_s; each copy may start once issued);
  with `issuer="pool"` (default) `issue_threads` helper threads issue them (issue_s each, in order)
  from the moment the transfer can start, and the main thread goes on. After an operation with
  `host_sync=True` the host waits until it ends, plus the engine's `sync_s`, before it issues anything
  else. Kernel launch costs on the GPU side are part of each kernel's duration.
- `Dep(op, "layer")` waits for `op` of the same layer and step; `Dep(op, "prev_layer")` for `op` of
  the previous layer (layer L-1 of the previous step for layer 0); `Dep(op, "prev_step")` for `op` of
  the same layer at the previous step. Dependencies before the first step are already satisfied.
- A `Transfer` holds its GPU stream(s) from its start until its last conversion ends. Its copies move
  in order (`copy_s` each); with staging (`chunk_copies` > 0) they fill `buffers` staging buffers of
  `chunk_copies` copies and a conversion kernel per filled buffer (`convert_fixed_s + copies *
  convert_per_copy_s`) empties it on the transfer's own stream; a buffer is refilled only after its
  conversion ended (closed forms: sim/transfer_forms.py). The host link is implied by `direction`: list
  only the GPU stream in `resources` ("h2d"/"d2h" are tolerated and ignored). Copy engines and link
  bandwidth are shared between transfers as in sim/copy_engines.py: one engine per direction by
  default (the CUDA driver's assignment), a fluid engine clock and a link (wire-time) clock per
  direction charged in issue order, so transfers of different streams overlap while latency- or
  issue-bound, and engine- or bandwidth-bound ones never exceed the engine or the link.

Resources: "compute" (the main GPU stream), "side" (a second GPU stream for background kernels),
"recall_sync" and "recall_bg" (two recall streams), "offload" (the offload stream).

Breakdown: the engine reports, per operation, seconds per token on the critical path of the compute
stream: busy time of operations on "compute", plus the idle time of "compute" blamed on what it waited
for: a dependency or a GPU stream (that op), a host sync (the op synced on, including `sync_s`), or
the host being late with its own work: that idle time is split over the host-lane intervals covering
it and shows under the key "<op>.host" (the op whose host_s or copy issue the host was busy with) in
category "host". Categories group operations: "select", "recall" and "host" (host-bound time) make
`critical_share`.

Adding a method = one file, `sim/methods/<name>.py`, declaring only its own operations, plus the method's
catalogue entry naming its class (traces.catalogue: the entry holds its knobs dataclass, which
`from_config` builds from `SimConfig.method_options` into `self.knobs`, and the runtime policy whose traces
it prices, `self.replays`: a trace of another policy is refused unless SimConfig.transplant_method).
The class (a frozen dataclass) subclasses `sim.methods.decoder_layer.DecoderMethod` (`GroupOptionMethod`
when its sets are per query head or per KV head by the knob `group_consistent`): the skeleton owns the
decoder layer every method runs (`qkv`, `attention`, `out_proj`, `ffn` on the compute stream, `lm_head`
at the last layer with the host sync per step, their cost-model work, dense layers attending the whole
context) and assembles `template` and `work`. The model declares:
- `own_ops(ctx)`: an `OwnOps` of its operations by place (before `qkv`, after `qkv`, after `attention`,
  after `out_proj`, after `ffn`), each an `OpSpec` with its queues, deps, host sync and category; what
  `attention` waits for (`attention_deps`); the shared ops after which the host waits (`syncs`);
- `own_work(ctx)`: their work (Kernel or Transfer, host seconds included; 0 in "ideal" mode);
- `attention_s(ctx)`: its attention's (S, L) GPU seconds (`attention_over`, `layer_attention_s` keep
  dense layers on the whole context);
- `recipe()`: the `DecoderRecipe` (sim/methods/eager.py) of the decoder its public code runs, which
  prices the shared ops as published (default: a stock HF eager decoder; `FREEKV_DECODER`, or its own
  recipe for a patched decoder, with `with_attention` for its own attention forward);
- `memory(cfg, model)`, and `prefill(ctx)` when the prefill is more than dense.
A method whose layer is not this decoder may subclass `Method` and write `template` and `work` itself.
Document every assumption with its source in the module and class docstrings and in `sources`. Reuse the
cost model (`ctx.cost`) for every duration; never hard-code a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from sim.demand import DENSE_POLICY

if TYPE_CHECKING:
    from sim.config import SimConfig
    from sim.cost_model import CostModel
    from sim.demand import BatchDemand, Demand
    from sim.hardware import HardwareProfile
    from sim.software import SoftwareProfile
    from traces.models import ModelSpec

__all__ = [
    "RESOURCES",
    "CATEGORIES",
    "Lag",
    "Dep",
    "OpSpec",
    "Kernel",
    "Transfer",
    "Work",
    "MemoryNeed",
    "CostContext",
    "Method",
]

RESOURCES = ("compute", "side", "recall_sync", "recall_bg", "offload", "h2d", "d2h")  # link: ignored
CATEGORIES = ("compute", "select", "recall", "offload", "sync", "host", "other")

Lag = Literal["layer", "prev_layer", "prev_step"]


@dataclass(frozen=True)
class Dep:
    """Wait for operation `op` of the same layer ("layer"), the previous layer, or the previous step."""

    op: str
    lag: Lag = "layer"


@dataclass(frozen=True)
class OpSpec:
    """One operation of a layer's template.

    name: unique within the template; the key of its work and of its breakdown entry.
    resources: in-order queues held from start to end (see RESOURCES); may be empty (pure join).
    deps: operations it waits for. host_sync: the host waits for it (plus host.sync_s) before issuing more.
    category: one of CATEGORIES, for critical_share and grouping.
    """

    name: str
    resources: tuple[str, ...]
    deps: tuple[Dep, ...] = ()
    host_sync: bool = False
    category: str = "compute"


@dataclass(frozen=True)
class Kernel:
    """GPU work: seconds (S, L) per layer-step on the op's stream(s); 0 = no GPU work there.
    host_s: main host thread seconds spent issuing it (eager dispatch, Python glue, CPU work), scalar
    or (S, L), charged on the host lane in program order before the op may start."""

    seconds: np.ndarray
    host_s: float | np.ndarray = 0.0


@dataclass(frozen=True)
class Transfer:
    """A batch of host<->device copies per layer-step (timing rules in the module docstring).

    n_copies: (S, L) int64 copies; 0 = no transfer at that layer-step.
    copy_s: copy-engine seconds per copy (dma latency + bytes / bandwidth), scalar or (S, L).
    bytes_per_copy: payload bytes per copy, scalar or (S, L) (link utilisation accounting).
    issue_s: host seconds to issue one copy; issue_threads: host threads issuing in parallel.
    chunk_copies: copies per staging buffer (0: copies land in place, no conversion).
    buffers: staging buffers (2: double buffering; 1: copy and conversion serialise).
    convert_fixed_s, convert_per_copy_s: conversion kernel per filled buffer.
    host_s: main host thread seconds before the copies are issued (scalar or (S, L)).
    issuer: "pool": `issue_threads` helper threads issue the copies once the transfer can start, the
    main thread goes on; "host": the main thread issues them itself (issue_threads must be 1), busy
    n_copies * issue_s right after host_s, and copies start as they are issued.
    """

    direction: Literal["h2d", "d2h"]
    n_copies: np.ndarray
    copy_s: float | np.ndarray
    bytes_per_copy: float | np.ndarray
    issue_s: float
    issue_threads: int
    chunk_copies: int = 0
    buffers: int = 0
    convert_fixed_s: float = 0.0
    convert_per_copy_s: float = 0.0
    host_s: float | np.ndarray = 0.0
    issuer: Literal["pool", "host"] = "pool"

    def __post_init__(self) -> None:
        if self.issuer not in ("pool", "host"):
            raise ValueError(f"Transfer issuer must be 'pool' or 'host', got {self.issuer!r}")
        if self.issuer == "host" and self.issue_threads != 1:
            raise ValueError(
                f"Transfer issued by the host thread needs issue_threads 1, got {self.issue_threads}"
            )
        if self.chunk_copies and self.buffers not in (1, 2):
            raise ValueError(f"Transfer with staging needs buffers 1 or 2, got {self.buffers}")
        if self.issue_threads < 1:
            raise ValueError(f"issue_threads must be >= 1, got {self.issue_threads}")


Work = Kernel | Transfer


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes a method keeps for KV state (weights, activations and staging are added by sim.memory).

    gpu_fixed_bytes: independent of batch; gpu_per_seq_bytes: per sequence at the longest context.
    host_per_seq_bytes: host (pinned) memory per sequence at the longest context.
    """

    gpu_fixed_bytes: int
    gpu_per_seq_bytes: int
    host_per_seq_bytes: int
    staging_bytes: int = 0


@dataclass(frozen=True)
class CostContext:
    """Everything a method needs to state its work: the config, shapes, hardware, cost model, demand.

    demand: per (step, layer) aggregates over the batch and KV heads (sim.demand.BatchDemand), with
    n_steps = cfg.output_tokens rows.
    software: the software profile (sim.software); method models charge its costs only when
    `implementation == "as-published"`.
    """

    cfg: SimConfig
    model: ModelSpec
    profile: HardwareProfile
    cost: CostModel
    demand: BatchDemand
    software: SoftwareProfile | None = None

    @property
    def implementation(self) -> str:
        """"as-published" (what the public code pays) or "ideal" (hardware limits): cfg.implementation."""
        return self.cfg.implementation

    @property
    def as_published(self) -> bool:
        return self.cfg.implementation == "as-published" and self.software is not None

    @property
    def shape(self) -> tuple[int, int]:
        """(S, L): decode steps and layers."""
        return (self.cfg.output_tokens, self.model.n_layers)

    def full(self, value: float | np.ndarray) -> np.ndarray:
        """Broadcast a scalar, a (S,) per-step or (S, L) value to a float64 (S, L) array."""
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        return np.broadcast_to(arr, self.shape).copy()

    def last_layer_only(self, value: float) -> np.ndarray:
        """(S, L) with `value` at the last layer and 0 elsewhere (per-step work such as the LM head)."""
        out = np.zeros(self.shape)
        out[:, -1] = value
        return out


@dataclass(frozen=True)
class Method(ABC):
    """A KV method: its layer template, its work per layer-step and its memory (module docstring).

    knobs: the method's knobs (its catalogue entry's dataclass; `from_config` builds them from
    SimConfig.method_options, refusing knobs only the runtime reads). replays: the runtime policy whose
    traces this model prices (the catalogue entry's `replays`; None: none)."""

    knobs: Any = None
    replays: str | None = field(default=None, kw_only=True)

    sources: ClassVar[tuple[str, ...]]
    needs_demand: ClassVar[bool] = True  # False: costs do not depend on a trace (e.g. dense)
    # True (with needs_demand False): closed-form costs without a trace, but a trace of its own policy
    # replaces them with what it recorded (e.g. InfiniGen's prefetched tokens)
    own_demand_optional: ClassVar[bool] = False

    def uses_demand(self, demand_method: str | None, transplant: bool = False) -> bool:
        """Whether this method prices the demand of `demand_method` (a trace's policy; None: synthetic):
        never a trace of dense attention (sim.demand.DENSE_POLICY: it holds no recall demand); else always
        when it needs demand, and only its own policy's (or a requested transplant's) when
        `own_demand_optional`."""
        if demand_method == DENSE_POLICY:
            return False
        if self.needs_demand:
            return True
        return self.optional_demand() and (demand_method == self.replays or transplant)

    def optional_demand(self) -> bool:
        """Whether this configured method would price its own trace (`own_demand_optional`; a method whose
        options decide it overrides this)."""
        return self.own_demand_optional

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Method:
        """Build with the knobs of `cfg.method_options` (its catalogue entry's knobs dataclass checks names
        and values; a knob only the runtime reads is refused) and the entry's `replays`."""
        from sim.errors import SimInputError
        from traces.catalogue import KnobError, entry

        method = entry(cfg.method, simulator=True)
        try:
            knobs = method.knobs_from(cfg.method_options, side="simulator")
        except KnobError as exc:
            raise SimInputError(f"method_options: {exc}", field="method_options", detail=f": {exc}") from None
        return cls(knobs, replays=method.replays)

    def for_demand(self, demand: Demand | None, transplant: bool = False) -> Method:
        """This method set up with what `demand` recorded beyond its per-step demand (e.g. RazorAttention's
        measured share of retrieval heads), for template, work and memory alike; transplant: the user
        asked to price another policy's trace (SimConfig.transplant_method). Default: itself."""
        return self

    def notes(self) -> tuple[str, ...]:
        """Lines for SimResult.notes on where this configured method's settings came from (e.g. a share
        taken from the trace). Default: none."""
        return ()

    @abstractmethod
    def template(self, ctx: CostContext) -> tuple[OpSpec, ...]:
        """The operations of one layer in host issue order."""

    @abstractmethod
    def work(self, ctx: CostContext) -> dict[str, Work]:
        """Work of every operation of the template, keyed by op name, arrays (S, L)."""

    @abstractmethod
    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """KV-related bytes on GPU and host (weights/activations excluded)."""

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Prefill seconds by operation for the whole batch (default: dense prefill of the prompt)."""
        return ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
