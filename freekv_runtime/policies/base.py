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
from typing import ClassVar

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.timing import OpTimer

__all__ = ["AttentionShape", "KVPolicy", "PolicyState", "StepDecisions", "PrefillDecisions"]


@dataclass(frozen=True)
class AttentionShape:
    n_layers: int
    n_qo_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def group_size(self) -> int:
        return self.n_qo_heads // self.n_kv_heads


@dataclass(frozen=True)
class PrefillDecisions:
    """Per batch element b: initial_selected[b][l][h] int32 page ids resident after prefill."""

    initial_selected: list[list[list[np.ndarray]]]


@dataclass(frozen=True)
class StepDecisions:
    """What the policy decided during one decode step, for every batch element.

    similarity: (b, L, Hkv) float32, NaN where undefined.   corrected: (b, L, Hkv) bool.
    selected[b][l][h], missed[b][l][h]: int32 sorted page ids (see traces.records.StepRecord).
    attended_tokens: (b, L, Hkv) int32.   attention_mass: (b, L, Hkv) float32 or None.
    """

    similarity: np.ndarray
    corrected: np.ndarray
    selected: list[list[list[np.ndarray]]]
    missed: list[list[list[np.ndarray]]]
    attended_tokens: np.ndarray
    attention_mass: np.ndarray | None = None


class PolicyState(ABC):
    """Per-request state of one policy for a batch: KV store, caches, last queries."""

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


class KVPolicy(ABC):
    """A method: frozen configuration, makes per-request states."""

    name: ClassVar[str]

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config

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
