"""The KV policy interface: how a decode loop asks a method to attend.

A `KVPolicy` is a frozen configuration of one method (FreeKV, full attention, later Quest, ArkVale,
RaaS, ...). `KVPolicy.new_state` makes the per-request `PolicyState`, which owns the KV store of a batch
and is called once per layer by the decode loop. The decode loop never looks inside a policy.

Shapes: b = batch, Hq = query heads, Hkv = KV heads, T = new tokens, d = head dim.
q, k, v are post-RoPE (k, v: the new tokens' keys and values, to be appended).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.timing import OpTimer

if TYPE_CHECKING:
    from freekv_runtime.model import RopeTable

__all__ = ["AttentionShape", "KVPolicy", "ModelAccess", "PolicyState", "PrefillOnlyState", "StepDecisions",
           "PrefillDecisions", "check_dense_layers"]


@dataclass(frozen=True)
class AttentionShape:
    n_layers: int
    n_qo_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def group_size(self) -> int:
        return self.n_qo_heads // self.n_kv_heads


def check_dense_layers(config: RuntimeConfig, shape: AttentionShape) -> None:
    """RuntimeConfigError when `dense_layers` names a layer the model does not have."""
    bad = [layer for layer in config.dense_layers if not 0 <= layer < shape.n_layers]
    if bad:
        raise RuntimeConfigError(f"dense_layers {bad} outside the model's layers 0..{shape.n_layers - 1}")


@dataclass(frozen=True)
class PrefillDecisions:
    """Per batch element b: initial_selected[b][l][h] int32 page ids resident after prefill;
    multi_context[b]: how a multi-context prompt was joined (traces.records.MultiContextRecord), or None."""

    initial_selected: list[list[list[np.ndarray]]]
    multi_context: list[Any] | None = None


@dataclass(frozen=True)
class StepDecisions:
    """What the policy decided during one decode step, for every batch element.

    similarity: (b, L, Hkv) float32, NaN where undefined.   corrected: (b, L, Hkv) bool.
    selected[b][l][h], missed[b][l][h]: int32 sorted page ids (see traces.records.StepRecord).
    attended_tokens: (b, L, Hkv) int32.   attention_mass: (b, L, Hkv) float32 or None.

    What the method moved at this step (trace format 2, see traces.records.StepRecord), each (b, L, Hkv):
    fetched_tokens int32: tokens copied host -> GPU (recalled, prefetched; synchronously for the heads
        with `corrected` True, in the background for the others);
    evicted_tokens int32: tokens the GPU cache gave up (dropped for good by a dropping method; replaced
        in a retrieval method's GPU cache, their host copy kept);
    refactorised bool: the head's compressed state was rebuilt (ShadowKV's re-factorisation).
    None: derived by the recorder (fetched = the missed pages times the page size, nothing evicted or
    rebuilt), which is what FreeKV-style page recall moves.
    """

    similarity: np.ndarray
    corrected: np.ndarray
    selected: list[list[list[np.ndarray]]]
    missed: list[list[list[np.ndarray]]]
    attended_tokens: np.ndarray
    attention_mass: np.ndarray | None = None
    fetched_tokens: np.ndarray | None = None
    evicted_tokens: np.ndarray | None = None
    refactorised: np.ndarray | None = None


class ModelAccess(Protocol):
    """What a policy may read of the loaded model beyond each layer's q, k, v (`KVPolicy.prepare`):
    InfiniGen's partial projections, ShadowKV's RoPE, RazorAttention's retrieval-head probe.
    `freekv_runtime.model.ModelAdapter` implements it."""

    shape: AttentionShape
    vocab_size: int  # token ids are 0 .. vocab_size - 1 (RazorAttention's random probe tokens)

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def q_proj(self, layer: int) -> torch.nn.Linear:
        """Layer `layer`'s query projection (D -> Hq * d; Qwen2's bias inside)."""

    def k_proj(self, layer: int) -> torch.nn.Linear:
        """Layer `layer`'s key projection (D -> Hkv * d)."""

    def rope_table(self, n_positions: int) -> RopeTable:
        """cos/sin of positions 0..n_positions-1 (freekv_runtime.model.RopeTable, apply_rope)."""

    def run_prefill(self, tokens: torch.Tensor, state: PolicyState) -> torch.Tensor:
        """Run a probe prompt tokens (b, T) through the model with `state` attending (its `prefill` per
        layer, its `layer_inputs` hook when it wants them); returns the last position's logits (b, V)."""


class PolicyState(ABC):
    """Per-request state of one policy for a batch: KV store, caches, last queries.

    wants_layer_inputs: when True, the model calls `layer_inputs` before each layer's prefill or decode
    (costs a little host time, so only states that use it ask)."""

    wants_layer_inputs: ClassVar[bool] = False

    def layer_inputs(self, layer: int, hidden: torch.Tensor, k_pre_rope: torch.Tensor, start: int) -> None:
        """Before layer `layer` attends: its normed attention input hidden (b, T, D), its new keys before
        RoPE k_pre_rope (b, Hkv, T, d), at positions start..start+T-1. Default: ignored."""
        return

    @abstractmethod
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention over the prompt. q (b, Hq, T, d); k, v (b, Hkv, T, d) -> (b, Hq, T, d)."""

    @abstractmethod
    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Append one token and attend. q (b, Hq, 1, d); k, v (b, Hkv, 1, d) -> (b, Hq, 1, d)."""

    @abstractmethod
    def end_prefill(self) -> PrefillDecisions:
        """Called once after all layers of the prefill ran."""

    @abstractmethod
    def end_step(self) -> StepDecisions:
        """Called once after all layers of a decode step ran; returns that step's decisions."""


class PrefillOnlyState(PolicyState):
    """A state that only measures a probe prompt through `ModelAccess.run_prefill` (RazorAttention's head
    probe, InfiniGen's calibration): subclasses implement `prefill`; decoding and the decode loop's hooks
    are refused."""

    def _refuse(self) -> RuntimeError:
        return RuntimeError(f"{type(self).__name__} measures a probe prefill only (ModelAccess.run_prefill); "
                            "it is not driven by a decode loop")

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise self._refuse()

    def end_prefill(self) -> PrefillDecisions:
        raise self._refuse()

    def end_step(self) -> StepDecisions:
        raise self._refuse()


class KVPolicy(ABC):
    """A method: frozen configuration, makes per-request states."""

    name: ClassVar[str]

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config

    def prepare(self, model: ModelAccess) -> None:
        """Called once by the runtime after the model is loaded and before any `new_state`: read what the
        method needs of the model (RazorAttention's head probe, InfiniGen's projections). Default: none."""
        return

    def prepared_metadata(self) -> dict[str, Any]:
        """What `prepare` found, as a small JSON-able dict (plain ints, floats, strings, lists, dicts), or
        {} for nothing: `run_trace` records it in the trace metadata as `meta.extra["policy_probe"]`
        (RazorAttention's retrieval heads, InfiniGen's calibration summary). Called after `prepare`.
        Default: {}."""
        return {}

    def config_notes(self) -> list[str]:
        """Warnings about this configuration of the method (one sentence each, naming the knob and what
        to change): `run_trace` records them in the trace metadata (`meta.extra["policy_notes"]`) and
        summary.json, and `dse trace` prints them. Default: none."""
        return []

    @abstractmethod
    def new_state(
        self,
        shape: AttentionShape,
        batch_size: int,
        device: torch.device,
        dtype: torch.dtype,
        timer: OpTimer,
    ) -> PolicyState:
        """Fresh state for a batch of `batch_size` sequences of equal prompt length."""
