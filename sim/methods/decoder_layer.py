"""The decoder-layer skeleton every method model shares: the common ops, their work and host costs.

Every method runs the same decoder layer around its own operations: `qkv` (norm, QKV projections, RoPE,
KV append), `attention`, `out_proj` (output projection, residual), `ffn` (norm, MLP, residual), all on
the compute stream, and once per step at the last layer `lm_head` (final norm, LM head, sampling),
after which the host waits for the sampled token (a host sync per step). Their GPU work comes from the
cost model (sim/cost_model.py); as published, their host costs from the `DecoderRecipe` of the code the
model prices (sim/methods/eager.py: a stock HF eager decoder, the official FreeKV runtime, an HF decoder
patched with a C++ extension, ...); "ideal" charges none. Layers in `SimConfig.dense_layers` attend the
whole context (`attention_over`, `layer_attention_s`).

A model (`DecoderMethod`) declares only what is its own:
- `own_ops(ctx)`: its operations by where they sit in the layer (`OwnOps`: before `qkv`, after `qkv`,
  after `attention`, after `out_proj`, after `ffn`), with their queues, dependencies, host syncs and
  categories; what `attention` waits for; the shared ops after which the host waits (beyond `lm_head`);
- `own_work(ctx)`: the work of those operations (Kernel or Transfer with their host seconds);
- `attention_s(ctx)`: the (S, L) GPU seconds of its attention;
- `recipe()`: the decoder its public code runs (default: a stock HF eager decoder);
- `memory(cfg, model)` and, when not a dense prefill, `prefill(ctx)`.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, Kernel, Method, OpSpec, Work
from sim.methods.eager import HF_DECODER, DecoderRecipe
from traces.models import ModelSpec

__all__ = [
    "SHARED_OPS",
    "OwnOps",
    "DecoderMethod",
    "GroupOptionMethod",
    "decoder_template",
    "decoder_work",
    "context_attention_s",
    "layer_attention_s",
    "attention_over",
    "layer_split",
    "prefill_offload_exposed_s",
]

SHARED_OPS = ("qkv", "attention", "out_proj", "ffn", "lm_head")


@dataclass(frozen=True)
class OwnOps:
    """A model's own operations by their place in the decoder layer (host issue order within a place).

    attention_deps: what the shared `attention` waits for (e.g. a recall). syncs: shared ops after which
    the host waits (e.g. FlexGen's device sync after each sub-layer); `lm_head` always syncs."""

    before_qkv: tuple[OpSpec, ...] = ()
    after_qkv: tuple[OpSpec, ...] = ()
    after_attention: tuple[OpSpec, ...] = ()
    after_out_proj: tuple[OpSpec, ...] = ()
    after_ffn: tuple[OpSpec, ...] = ()
    attention_deps: tuple[Dep, ...] = ()
    syncs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.syncs) - set(SHARED_OPS)
        if unknown:
            raise ValueError(f"OwnOps.syncs names no shared op: {sorted(unknown)} (shared: {SHARED_OPS})")


def decoder_template(own: OwnOps) -> tuple[OpSpec, ...]:
    """One layer in host issue order: the shared ops on the compute stream with `own`'s ops in place."""

    def shared(name: str, deps: tuple[Dep, ...] = ()) -> OpSpec:
        return OpSpec(name, ("compute",), deps, host_sync=name == "lm_head" or name in own.syncs)

    return (
        *own.before_qkv,
        shared("qkv"),
        *own.after_qkv,
        shared("attention", own.attention_deps),
        *own.after_attention,
        shared("out_proj"),
        *own.after_out_proj,
        shared("ffn"),
        *own.after_ffn,
        shared("lm_head"),
    )


def decoder_work(ctx: CostContext, recipe: DecoderRecipe, attention_s: np.ndarray) -> dict[str, Work]:
    """Work of the shared ops: cost-model seconds (`attention_s` (S, L) for the attention; the LM head at
    the last layer) and, as published, the host seconds of `recipe` (its step preparation on layer 0's
    qkv, its per-step glue and read-back on the last layer's lm_head)."""
    cost = ctx.cost
    seconds = {
        "qkv": ctx.full(cost.qkv_s()),
        "attention": np.asarray(attention_s, dtype=np.float64),
        "out_proj": ctx.full(cost.out_proj_s()),
        "ffn": ctx.full(cost.ffn_s()),
        "lm_head": ctx.last_layer_only(cost.lm_head_s()),
    }
    if not ctx.as_published:
        return {op: Kernel(s) for op, s in seconds.items()}
    sw = ctx.software
    assert sw is not None
    qkv = ctx.full(recipe.qkv.seconds(sw))
    qkv[:, 0] += recipe.step_prepare(ctx.model.n_layers).seconds(sw)
    host = {
        "qkv": qkv,
        "attention": recipe.attention.seconds(sw),
        "out_proj": recipe.out_proj.seconds(sw),
        "ffn": recipe.ffn.seconds(sw),
        "lm_head": ctx.last_layer_only(recipe.step.seconds(sw)),
    }
    return {op: Kernel(s, host_s=host[op]) for op, s in seconds.items()}


def context_attention_s(ctx: CostContext) -> np.ndarray:
    """(S, L) attention over the whole context at every layer (sim.cost_model.attention_s)."""
    return ctx.full(ctx.cost.attention_s(ctx.demand.context_tokens))


def layer_attention_s(ctx: CostContext, sparse_s: float | np.ndarray) -> np.ndarray:
    """(S, L) attention seconds: `sparse_s` (scalar, (S,) or (S, L)) on sparse layers, the whole context on
    dense layers."""
    return np.where(ctx.demand.dense_layer[None, :], context_attention_s(ctx), ctx.full(sparse_s))


def attention_over(ctx: CostContext, tokens: np.ndarray) -> np.ndarray:
    """(S, L) attention over `tokens` per KV head ((S,) or (S, L)) on sparse layers, over the whole
    context on dense layers."""
    dem = ctx.demand
    tokens = np.asarray(tokens)
    per_layer = tokens[:, None] if tokens.ndim == 1 else tokens
    attended = np.where(dem.dense_layer[None, :], dem.context_tokens[:, None], per_layer)
    return np.asarray(ctx.cost.attention_s(attended), dtype=np.float64)


def layer_split(cfg: SimConfig, model: ModelSpec) -> tuple[int, int]:
    """(sparse layers, dense layers) of the config on the model."""
    n_dense = len([x for x in cfg.dense_layers if x < model.n_layers])
    return model.n_layers - n_dense, n_dense


def prefill_offload_exposed_s(
    ctx: CostContext, parts: dict[str, float], layer_bytes: int, layers: int
) -> float:
    """Prefill seconds the device->host copy of `layer_bytes` per layer leaves exposed on `layers` layers
    when each layer's copy runs behind the next layer's share of the prefill compute `parts`."""
    offload_layer = float(ctx.cost.copy_s(layer_bytes, layer_bytes, "d2h"))
    compute_layer = sum(parts.values()) / ctx.model.n_layers
    return layers * max(0.0, offload_layer - compute_layer)


@dataclass(frozen=True)
class DecoderMethod(Method):
    """A method model on the shared decoder layer (module docstring): it declares its own ops, their work,
    its attention and the decoder its public code runs; `template` and `work` assemble the layer."""

    def recipe(self) -> DecoderRecipe:
        """The decoder the public code runs, priced as published (default: a stock HF eager decoder)."""
        return HF_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        """The model's own operations by place in the layer (default: none)."""
        return OwnOps()

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        """Work of every op of `own_ops`, keyed by op name, arrays (S, L) (default: none)."""
        return {}

    @abstractmethod
    def attention_s(self, ctx: CostContext) -> np.ndarray:
        """(S, L) GPU seconds of the attention."""

    def template(self, ctx: CostContext) -> tuple[OpSpec, ...]:
        return decoder_template(self.own_ops(ctx))

    def work(self, ctx: CostContext) -> dict[str, Work]:
        shared = decoder_work(ctx, self.recipe(), self.attention_s(ctx))
        own = self.own_work(ctx)
        clash = sorted(set(own) & set(shared))
        if clash:
            raise ValueError(f"{type(self).__name__}.own_work names shared ops {clash}")
        return {**shared, **own}


@dataclass(frozen=True)
class GroupOptionMethod(DecoderMethod):
    """A method whose page sets are per query head, or per KV head when its knob `group_consistent`
    (FreeKV's evaluation made Quest and RaaS group-consistent); the catalogue sets the default."""

    def sets_per_layer(self, model: ModelSpec) -> int:
        """Page sets per sequence and layer (each read and kept on its own): KV heads if group-consistent,
        else query heads."""
        return model.n_kv_heads if self.knobs.group_consistent else model.n_qo_heads
