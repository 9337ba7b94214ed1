"""Full KV offload: the whole KV cache lives in host memory and every layer's KV is streamed each step.

Assumptions (model choices, in the style of FlexGen / DeepSpeed ZeRO-Inference KV offload): per
sequence and layer the host keeps K and V contiguous, so a layer's fetch is one large copy per
sequence at full link efficiency; the fetch of layer l is issued at the start of layer l and may start
once layer l-1 has attended (two layer buffers: one attended, one filling), so it overlaps the previous
layer's output projection and FFN and this layer's QKV projection; attention runs on the GPU over the
fetched context. Each step the new token's K and V of every layer are written back (one small copy
per sequence and layer, device to host). No selection: all tokens are attended.
Source: Sheng et al., FlexGen (ICML 2023), section 4 (KV cache offloading with layer-wise overlap).

As published: the offloaded cache of a stock HF eager decoder (transformers cache_utils.py
`OffloadedCache`: `__getitem__` calls `torch.cuda.current_stream().synchronize()` for every layer (a host
sync after the layer's QKV), `evict_previous_layer` copies the previous layer's WHOLE K and V tensors back
to the host with `.to("cpu", non_blocking=True)` and `prefetch_layer` copies the next layer's K and V to
the GPU on a prefetch stream): per layer two whole-layer host-to-device copies (K, V, batch included) and
two whole-layer device-to-host copies, issued by the main thread as torch copies; the decoder ops as the HF
recipes of sim/methods/eager.py. "ideal" charges no host cost and keeps the write-back to the new token.

Option `runtime` "flexgen": FlexGen's own loop as InfiniGen's speedup scripts run it (the baseline
"FlexGen" of InfiniGen's Fig. 14-16; sim/methods/flexgen_cache.py has the code lines): the cache in
pageable host memory, per layer the whole past K and V copied to the GPU (`fetch` before the layer's
QKV, the host waiting for the driver's staging), attention on the GPU after `mha_gen`'s copies of K
and V, a device sync after the attention sub-layer and after the MLP sub-layer
(`generation_loop_normal`, --overlap false), then the new token's K and V stored to the pageable cache
(the host waits); FlexGen's eager OPT decoder ops (sim/methods/infinigen.FLEXGEN_DECODER). Its ideal
mode is the ideal full offload above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import DecoderMethod, OwnOps, context_attention_s
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.flexgen_cache import MHA_GEN_COPIES_FLEXGEN, mha_gen_copies_s, pageable_transfer
from sim.methods.host_costs import HostOps
from sim.methods.infinigen import FLEXGEN_DECODER
from traces.models import ModelSpec

__all__ = ["FullOffload"]

# OffloadedCache (transformers cache_utils.py): ~4 Python calls around each whole-layer copy call
_CACHE_CALL = HostOps(python_ops=4)


@dataclass(frozen=True)
class FullOffload(DecoderMethod):
    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Sheng et al., FlexGen: High-Throughput Generative Inference of LLMs with a Single GPU (ICML 2023)",
    )

    def _flexgen(self, ctx: CostContext) -> bool:
        """FlexGen's own loop is priced (option runtime "flexgen", as published)."""
        return ctx.as_published and self.knobs.runtime == "flexgen"

    def recipe(self) -> DecoderRecipe:
        return FLEXGEN_DECODER if self.knobs.runtime == "flexgen" else HF_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        if self._flexgen(ctx):  # load, compute, sync, store, all in program order (module docstring)
            fetch = OpSpec("fetch", ("recall_sync", "h2d"), host_sync=True, category="recall")
            writeback = OpSpec(
                "writeback", ("offload", "d2h"), (Dep("qkv"),), host_sync=True, category="offload"
            )
            return OwnOps(
                before_qkv=(fetch,),
                after_out_proj=(writeback,),
                attention_deps=(Dep("fetch"),),
                syncs=frozenset({"out_proj", "ffn"}),
            )
        # as published, OffloadedCache.__getitem__ synchronises the current stream every layer
        return OwnOps(
            before_qkv=(
                OpSpec("fetch", ("recall_bg", "h2d"), (Dep("attention", "prev_layer"),), category="recall"),
            ),
            after_qkv=(OpSpec("writeback", ("offload", "d2h"), (Dep("qkv"),), category="offload"),),
            attention_deps=(Dep("fetch"),),
            syncs=frozenset({"qkv"}) if ctx.as_published else frozenset(),
        )

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        if self._flexgen(ctx):  # mha_gen's permute-reshape copies of K and V before the bmm
            copies = mha_gen_copies_s(ctx, ctx.full(ctx.demand.context_tokens), MHA_GEN_COPIES_FLEXGEN)
            return context_attention_s(ctx) + copies
        return context_attention_s(ctx)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        if self._flexgen(ctx):
            return self._flexgen_work(ctx)
        return self._published_work(ctx) if ctx.as_published else self._ideal_work(ctx)

    def _flexgen_work(self, ctx: CostContext) -> dict[str, Work]:
        """FlexGen: the layer's whole past K and V (two copies, batch included) from the pageable cache, the
        new token's K and V (two copies) back to it."""
        b = ctx.cfg.batch_size
        layer_token_bytes, past = self._past_bytes(ctx)
        kv = 2
        ones = np.ones(ctx.shape, dtype=np.int64)
        return {
            "fetch": pageable_transfer(ctx, "h2d", kv * ones, past * b / kv),
            "writeback": pageable_transfer(ctx, "d2h", kv * ones, ctx.full(layer_token_bytes * b / kv)),
        }

    @staticmethod
    def _past_bytes(ctx: CostContext) -> tuple[int, np.ndarray]:
        """K and V bytes of one token of one layer, and (S, L) bytes of a layer's past per sequence."""
        m = ctx.model
        layer_token_bytes = 2 * m.n_kv_heads * m.head_dim * ctx.cfg.dtype_bytes
        return layer_token_bytes, ctx.full(ctx.demand.context_tokens - 1) * layer_token_bytes

    def _published_work(self, ctx: CostContext) -> dict[str, Work]:
        """HF OffloadedCache: whole-layer K and V copies both ways (module docstring)."""
        cost, b, sw = ctx.cost, ctx.cfg.batch_size, ctx.software
        assert sw is not None
        layer_token_bytes, past = self._past_bytes(ctx)
        ones = np.ones(ctx.shape, dtype=np.int64)
        kv = 2
        layer = past * b + layer_token_bytes * b  # after this token's append
        common = dict(
            issue_s=sw.torch_copy_call_s, issue_threads=1, issuer="host", host_s=_CACHE_CALL.seconds(sw)
        )
        return {
            "fetch": Transfer(
                direction="h2d",
                n_copies=np.where(past > 0, kv, 0) * ones,
                copy_s=np.asarray(cost.copy_s(past * b / kv, 1 << 40, "h2d")),
                bytes_per_copy=past * b / kv,
                **common,
            ),
            "writeback": Transfer(
                direction="d2h",
                n_copies=kv * ones,
                copy_s=np.asarray(cost.copy_s(layer / kv, 1 << 40, "d2h")),
                bytes_per_copy=layer / kv,
                **common,
            ),
        }

    def _ideal_work(self, ctx: CostContext) -> dict[str, Work]:
        """One contiguous copy per sequence and layer each way (module docstring)."""
        cost, b, link = ctx.cost, ctx.cfg.batch_size, ctx.profile.link
        layer_token_bytes, past = self._past_bytes(ctx)
        ones = np.ones(ctx.shape, dtype=np.int64)
        return {
            "fetch": Transfer(
                direction="h2d",
                n_copies=np.where(past > 0, b, 0) * ones,
                copy_s=np.asarray(cost.copy_s(past, 1 << 40, "h2d")),
                bytes_per_copy=past,
                issue_s=link.copy_issue_s,
                issue_threads=ctx.profile.host.issue_threads,
            ),
            "writeback": Transfer(
                direction="d2h",
                n_copies=b * ones,
                copy_s=float(cost.copy_s(layer_token_bytes, layer_token_bytes, "d2h")),
                bytes_per_copy=layer_token_bytes,
                issue_s=link.copy_issue_s,
                issue_threads=1,
            ),
        }

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        layer_bytes = cfg.max_context_tokens * 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        return MemoryNeed(
            gpu_fixed_bytes=0,
            gpu_per_seq_bytes=2 * layer_bytes,  # two layer buffers
            host_per_seq_bytes=model.n_layers * layer_bytes,
            staging_bytes=0,
        )
