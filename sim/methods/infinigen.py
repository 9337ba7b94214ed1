"""InfiniGen: speculate the next layer's important tokens and prefetch them from host memory.

Source: Lee et al., "InfiniGen: Efficient Generative Inference of Large Language Models with Dynamic
KV Cache Management" (OSDI 2024), built on FlexGen's offloading runtime, and its code
(snu-comparch/InfiniGen, speedup/infinigen/infinigen/kv_selection_controller.py, speedup/flexgen/
infinigen/pytorch_backend.py, speedup/scripts/figure14/run.sh). Assumptions (docs/methods.md):

- The KV cache of every layer except layers 0 and 1 lives in host memory (kept whole on the GPU: the
  code speculates from layer 2 on, accuracy/src/modeling_llama_ours.py:703-704, speedup/flexgen/
  infinigen/flex_opt.py:287; knob `dense_layer_1` false keeps only layer 0, the FreeKV paper's setup;
  as published they stay in FlexGen's host cache and are loaded whole every step, see `load` below).
  The GPU keeps, per layer, a partial key cache (`partial_ratio` of the channels of the skewed keys,
  every token; 0.2 is the code's `--partial-weight-ratio`) and partial query weights.
- At layer i, right after the attention input is formed, InfiniGen speculates layer i+1
  (`speculate_attention`): a GEMV with layer i+1's partial query weights and a partial QK over every
  cached token, then top-k. The indices go back to the host (`.to(k_cache.device)`): the host, which
  has meanwhile issued layer i's attention and FFN, waits for them (a host sync) before gathering.
- Gathering the selected tokens, two ways (`gather`):
  "cpu" (default, what the code does: `select_kv` is an `F.embedding` over the host-resident cache):
  the host thread gathers the selected rows of d elements (256 B) into a contiguous buffer, reading
  scattered rows and writing them out (2x the bytes at `cpu_gather_fraction` of the host memory
  bandwidth; the host thread is busy meanwhile), then K and V go to the GPU as two contiguous copies.
  "dma": the copy engine gathers directly, one copy per (sequence, KV head) made of runs of one
  token of one head (`run_bytes`, default d elements), at the profile's run efficiency.
  Either way the prefetch of layer i+1 overlaps layer i's attention, output projection and FFN and
  layer i+1's QKV projection; layer i+1's attention waits for it.
- Prefetch volume: the selected tokens of every (sequence, KV head), every step, with no reuse of
  what is already on the GPU. The code picks a variable count (scores above max - alpha, capped by
  `max_num_kv`); here `budget_tokens` per KV head for a like-for-like comparison at the same budget,
  unless a trace of InfiniGen's own runtime policy is replayed: then the tokens it fetched per layer
  and step (fetch ratio x budget - sink - window, sim/demand.py), as recorded. With `selection`
  per-query-head (the code's top-k per head) a KV head fetches the union of its group's tokens: the trace
  records that union; the closed form assumes one head's count (the union's lower bound).
- Each step the new token's K and V of every offloaded layer are written back (device->host).

As published (SimConfig.implementation "as-published"; "ideal" keeps the overlapped schedule above at
hardware limits). The code (snu-comparch/InfiniGen at 3754f52; speedup/flexgen/infinigen/flex_opt.py,
pytorch_backend.py, speedup/infinigen/infinigen/kv_selection_controller.py) is FlexGen's eager PyTorch
runtime; per layer, generation_loop_normal (flex_opt.py:1060-1075) runs the attention sub-layer,
synchronises the device (self.sync(), flex_opt.py:1070 -> torch.cuda.synchronize, :932-934), stores
the new KV, issues the next layer's prefetch, runs the MLP sub-layer and synchronises again:
- qkv: layer_norm, reform_hidden_states, three F.linear and the permute/reshape copies of q, k, v
  (pytorch_backend.py:396-418): 8 eager ops + 6 Python view steps.
- speculate (layer i for layer i+1, kv_selection_controller.py:28-62): partial-query F.linear, bmm,
  max, threshold (sub, unsqueeze, repeat), where/ones_like/zeros_like, sum, mean, topk: 12 eager ops +
  2 Python steps, and `.item()` of the mean count (:58): a read-back, the host waits (host_sync). On the
  same stream, each speculated layer appends its new token to its partial key cache with `torch.cat`
  (flex_opt.py:541-542, set_partial_cache's gather + cat: 2 eager ops), a copy of the whole partial
  cache every step (read and write of context x heads x partial_ratio x d elements).
- attention (_attention_value / _attention_weights: bmm, mask, softmax, bmm, views): 6 eager ops; before
  it `mha_gen` copies the attended K and V twice (torch.cat, permute-reshape: flexgen_cache.py).
- out_proj: F.linear + residual add, 2 eager ops; then the device sync of flex_opt.py:1070 (host_sync).
- load: the layers InfiniGen does not speculate (layer 0, layer 1) load their whole past K and V from
  FlexGen's pageable host cache before the layer, the host waiting (sim/methods/flexgen_cache.py; all
  layers' caches are on the host at --percent 100 0 0 100 100 0).
- writeback: store_cache copies the new K and V of every layer to the pageable host cache: 2 copies
  issued by the host thread, which waits for each (a device-to-host copy into pageable memory).
- gather (pure host work): select_kv (kv_selection_controller.py:21-24) moves the indices to the CPU
  (`.to(k_cache.device)`, a read-back), builds flat indices (2 CPU ops) and gathers K and V with two
  F.embedding on the CPU (the host thread reads the scattered rows and writes them contiguously).
- prefetch: two smart_copy calls on the prefetch stream (flex_opt.py:461-465), issued by the host.
- ffn: layer_norm, F.linear, relu, F.linear, residual add (pytorch_backend.py:591-606): 5 eager ops,
  then the device sync of flex_opt.py:1070 (`ffn_sync`): torch.cuda.synchronize() waits for every stream,
  so the host also waits for the prefetch issued after the attention sub-layer (flex_opt.py:1074,
  on prefetch_cache_stream): the prefetch overlaps the MLP sub-layer only, never the next layer's QKV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, Kernel, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import DecoderMethod, OwnOps, prefill_offload_exposed_s
from sim.methods.eager import HF_OUT_PROJ, DecoderRecipe
from sim.methods.flexgen_cache import MHA_GEN_COPIES_INFINIGEN, mha_gen_copies_s, pageable_transfer
from sim.methods.host_costs import HostOps, host_s
from traces.models import ModelSpec

__all__ = ["InfiniGen", "FLEXGEN_DECODER", "HOST_COPY_TRAFFIC", "published_cpu_gather_s"]

# bytes of DRAM traffic per byte of a host copy: read the source, write the destination, and the
# write-allocate read of the destination's lines (ordinary stores)
HOST_COPY_TRAFFIC = 3.0

# FlexGen's eager OPT decoder (module docstring): qkv, attention, out_proj, ffn, per step (LM head, sampling)
FLEXGEN_DECODER = DecoderRecipe(
    qkv=HostOps(torch_ops=8, python_ops=6),
    attention=HostOps(torch_ops=6),
    out_proj=HF_OUT_PROJ,
    ffn=HostOps(torch_ops=5),
    step=HostOps(torch_ops=4, readbacks=1),
)


@dataclass(frozen=True)
class InfiniGen(DecoderMethod):
    """InfiniGen (module docstring). partial_ratio: share of key/query channels used to speculate;
    gather: "cpu" (host gathers, contiguous copies) or "dma" (copy engine gathers runs of `run_bytes`,
    0: one token of one head); cpu_gather_fraction: share of host memory bandwidth the gather reaches."""


    needs_demand: ClassVar[bool] = False
    own_demand_optional: ClassVar[bool] = True  # its own trace's prefetched tokens replace the closed form
    sources: ClassVar[tuple[str, ...]] = (
        "Lee et al., InfiniGen: Efficient Generative Inference of LLMs with Dynamic KV Cache Management "
        "(OSDI 2024): partial query weights and partial key cache, speculation of layer i+1 at layer i, "
        "prefetch overlapping the current layer, speculation from layer 1 on",
        "Sheng et al., FlexGen (ICML 2023): host KV layout (token, head, d) of the runtime InfiniGen extends",
        "snu-comparch/InfiniGen code: select_kv gathers on the host with F.embedding; figure14 script uses "
        "--alpha 4 --partial-weight-ratio 0.2 --max-num-kv 400",
    )

    def recipe(self) -> DecoderRecipe:
        return FLEXGEN_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        speculate = OpSpec("speculate", ("compute",), host_sync=ctx.as_published, category="select")
        writeback = OpSpec("writeback", ("offload", "d2h"), (Dep("qkv"),), category="offload")
        prefetch = OpSpec("prefetch", ("recall_bg", "h2d"), (Dep("gather"),), category="recall")
        attention_deps = (Dep("prefetch", "prev_layer"),)
        if ctx.as_published:  # FlexGen's loop: device sync after each sub-layer (module docstring)
            gather = OpSpec("gather", (), (Dep("speculate"),), category="recall")
            load = OpSpec("load", ("recall_sync", "h2d"), host_sync=True, category="recall")
            writeback = OpSpec(
                "writeback", ("offload", "d2h"), (Dep("qkv"),), host_sync=True, category="offload"
            )
            # the sync after the MLP sub-layer is torch.cuda.synchronize(): it waits for every stream, so
            # for the prefetch issued after the attention sub-layer as well (module docstring)
            ffn_sync = OpSpec(
                "ffn_sync", (), (Dep("ffn"), Dep("prefetch")), host_sync=True, category="recall"
            )
            return OwnOps(
                before_qkv=(load,),
                after_qkv=(speculate,),
                after_out_proj=(writeback, gather, prefetch),
                after_ffn=(ffn_sync,),
                attention_deps=(*attention_deps, Dep("load")),
                syncs=frozenset({"out_proj"}),
            )
        # host side (no GPU resource): read the indices back, gather ("cpu"); the host waits for it
        gather = OpSpec("gather", (), (Dep("speculate"),), host_sync=True, category="recall")
        return OwnOps(
            after_qkv=(writeback, speculate), after_ffn=(gather, prefetch), attention_deps=attention_deps
        )

    def offloaded_layers(self, cfg: SimConfig, model: ModelSpec) -> np.ndarray:
        """(L,) bool: layers whose KV lives in host memory (all but layer 0, layer 1 with the knob
        `dense_layer_1` (InfiniGen's code), and SimConfig.dense_layers)."""
        out = np.ones(model.n_layers, dtype=bool)
        out[: 2 if self.knobs.dense_layer_1 else 1] = False
        out[[x for x in cfg.dense_layers if x < model.n_layers]] = False
        return out

    def prefetched_tokens(self, ctx: CostContext, closed_form: np.ndarray) -> np.ndarray:
        """(S, L) tokens prefetched per (sequence, KV head) at layer i for layer i+1: from InfiniGen's own
        trace (its fetched tokens of layer i+1, BatchDemand.fetched_tokens, averaged over the batch's
        heads) when given, else the closed form `closed_form` (S,) (budget_tokens, module docstring)."""
        dem, m = ctx.demand, ctx.model
        out = np.broadcast_to(np.asarray(closed_form, dtype=np.float64)[:, None], ctx.shape).copy()
        if dem.method == self.replays:
            per_head = dem.fetched_tokens / float(ctx.cfg.batch_size * m.n_kv_heads)
            out[:, :-1] = per_head[:, 1:]
            out[:, -1] = 0.0
        return out

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        """Offloaded layers attend the prefetched tokens, the others (layer 0, dense layers) the context."""
        context = ctx.demand.context_tokens.astype(np.float64)
        tokens = np.minimum(context, ctx.cfg.budget_tokens)
        offloaded = self.offloaded_layers(ctx.cfg, ctx.model)
        attended = np.where(offloaded[None, :], tokens[:, None], context[:, None])
        attention = np.asarray(ctx.cost.attention_s(attended), dtype=np.float64)
        if ctx.as_published:  # InfiniGen's mha_gen copies K and V twice before its bmm (flexgen_cache.py)
            copies = mha_gen_copies_s(ctx, attended * np.ones(ctx.shape), MHA_GEN_COPIES_INFINIGEN)
            attention = attention + copies
        return attention

    def _targets(self, ctx: CostContext) -> np.ndarray:
        """(L,) bool: layers whose work serves an offloaded next layer (nothing at the last layer)."""
        target = np.zeros(ctx.model.n_layers, dtype=bool)
        target[:-1] = self.offloaded_layers(ctx.cfg, ctx.model)[1:]
        return target

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        offloaded = self.offloaded_layers(cfg, m)
        pub = ctx.as_published
        token_bytes = 2 * m.n_kv_heads * d * dt  # the new token of one layer, all KV heads
        if pub:  # ffn_sync: FlexGen's self.sync(), two Python calls (disk queue join, cuda synchronize)
            sync_host = np.ones(ctx.shape) * host_s(ctx, HostOps(python_ops=2))  # flex_opt.py:932-934
            ffn_sync = Kernel(np.zeros(ctx.shape), host_s=sync_host)
            return {**self._pageable_cache_work(ctx), "speculate": self._speculate(ctx),
                    **self._gather_and_prefetch(ctx), "ffn_sync": ffn_sync}
        return {
            "writeback": Transfer(
                direction="d2h",
                n_copies=(np.where(offloaded[None, :], b, 0) * np.ones(ctx.shape)).astype(np.int64),
                copy_s=float(cost.copy_s(token_bytes, token_bytes, "d2h")),
                bytes_per_copy=token_bytes,
                issue_s=self._copy_issue_s(ctx),
                issue_threads=1,
                issuer="host" if pub else "pool",
            ),
            "speculate": self._speculate(ctx),
            **self._gather_and_prefetch(ctx),
        }

    def _pageable_cache_work(self, ctx: CostContext) -> dict[str, Work]:
        """As published: FlexGen keeps every layer's KV in its pageable host cache (sim/methods/
        flexgen_cache.py). Layers InfiniGen does not speculate (layer 0, layer 1 with `dense_layer_1`, and
        SimConfig.dense_layers) load their whole past K and V before the layer (flex_opt.py:799-803 calls
        `load_cache` for every attention layer but attn_layer[2:], path 0 at :384-397); every layer
        stores the new token's K and V (store_cache, flex_opt.py:1072)."""
        b, m = ctx.cfg.batch_size, ctx.model
        layer_token_bytes = 2 * m.n_kv_heads * m.head_dim * ctx.cfg.dtype_bytes
        whole = ~self.offloaded_layers(ctx.cfg, m)
        past = ctx.full(ctx.demand.context_tokens - 1) * layer_token_bytes * b  # K and V, one layer
        kv = 2
        ones = np.ones(ctx.shape, dtype=np.int64)
        return {
            "load": pageable_transfer(ctx, "h2d", np.where(whole[None, :], kv, 0) * ones, past / kv),
            "writeback": pageable_transfer(ctx, "d2h", kv * ones, ctx.full(layer_token_bytes * b / kv)),
        }

    @staticmethod
    def _copy_issue_s(ctx: CostContext) -> float:
        """Host seconds per copy: a torch copy call as published, the driver's cost in ideal mode."""
        return host_s(ctx, HostOps(torch_copies=1)) if ctx.as_published else ctx.profile.link.copy_issue_s

    def _speculate(self, ctx: CostContext) -> Kernel:
        """At layer i for layer i+1: the partial-query GEMV, the partial QK over every cached token, top-k."""
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        target = self._targets(ctx)
        context = ctx.demand.context_tokens.astype(np.float64)
        part = self.knobs.partial_ratio * d
        spec_gemv = cost.gemm_s(b, m.hidden_size, int(round(m.n_qo_heads * part)))
        spec_scores = cost.kernel_s(
            2.0 * b * m.n_qo_heads * context * part,
            b * m.n_kv_heads * context * part * dt + 3 * b * m.n_qo_heads * context * 4,
            2,  # partial QK, top-k
        )
        speculate = np.where(target[None, :], (spec_gemv + spec_scores)[:, None], 0.0)
        at_target = np.where(target[None, :], 1.0, 0.0) * np.ones(ctx.shape)
        spec_host = at_target * host_s(ctx, HostOps(torch_ops=12, python_ops=2, readbacks=1))
        if ctx.as_published:  # the partial key cache grows by torch.cat every step (a whole copy)
            offloaded = self.offloaded_layers(cfg, m)
            partial_bytes = b * m.n_kv_heads * context * part * dt  # (S,) one layer's partial keys
            grow = cost.kernel_s(0.0, 2.0 * partial_bytes, 2)  # read the old cache, write the new one
            speculate = speculate + np.where(offloaded[None, :], np.asarray(grow)[:, None], 0.0)
            spec_host = spec_host + np.where(offloaded[None, :], 1.0, 0.0) * host_s(ctx, HostOps(torch_ops=2))
        return Kernel(np.asarray(speculate, dtype=np.float64), host_s=spec_host)

    def _gather_and_prefetch(self, ctx: CostContext) -> dict[str, Work]:
        """The gather of the speculated tokens (host or copy engine) and their prefetch (module docstring)."""
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        target = self._targets(ctx)
        tokens = np.minimum(ctx.demand.context_tokens.astype(np.float64), cfg.budget_tokens)
        fetched = self.prefetched_tokens(ctx, tokens)  # (S, L) per (sequence, KV head), for layer i+1
        kv_bytes = b * m.n_kv_heads * fetched * 2 * d * dt  # K and V of the selected tokens, one layer
        ones = np.ones(ctx.shape)
        index_bytes = b * m.n_kv_heads * fetched * 4  # int32 token ids read back to the host
        readback = np.asarray(cost.copy_s(index_bytes, 1 << 40, "d2h"), dtype=np.float64)
        if self.knobs.gather == "cpu":
            host_bw = ctx.profile.host.memory_bandwidth_gbps * 1e9 * self.knobs.cpu_gather_fraction
            gather = np.where(target[None, :], readback + 2.0 * kv_bytes / host_bw, 0.0)
            n_prefetch = np.where(target[None, :], 2, 0) * ones  # one contiguous copy for K, one for V
            per_copy = kv_bytes / 2
            prefetch_copy = np.asarray(cost.copy_s(per_copy, 1 << 40, "h2d"), dtype=np.float64)
        else:
            gather = np.where(target[None, :], readback, 0.0)
            run = self.knobs.run_bytes or d * dt
            n_prefetch = np.where(target[None, :], b * m.n_kv_heads, 0) * ones  # one per (sequence, head)
            per_copy = fetched * 2 * d * dt
            prefetch_copy = np.asarray(cost.copy_s(per_copy, run, "h2d"), dtype=np.float64)
        n_prefetch = np.where(fetched > 0, n_prefetch, 0)
        if ctx.as_published:  # the gather is host work (no GPU time): index read-back, CPU ops, CPU gather
            at_target = np.where(target[None, :], 1.0, 0.0) * ones
            if self.knobs.gather == "cpu":
                rows = b * m.n_kv_heads * fetched  # rows of d elements, per K and per V
                host_gather = published_cpu_gather_s(ctx, rows, kv_bytes)
                gather = np.where(target[None, :], readback + host_gather, 0.0)
            gather_host = at_target * (
                np.asarray(gather, dtype=np.float64) + host_s(ctx, HostOps(readbacks=1, torch_ops=2))
            )
            gather_work = Kernel(np.zeros(ctx.shape), host_s=gather_host)
        else:
            gather_work = Kernel(np.asarray(gather, dtype=np.float64))
        return {
            "gather": gather_work,
            "prefetch": Transfer(
                direction="h2d",
                n_copies=n_prefetch.astype(np.int64),
                copy_s=prefetch_copy,
                bytes_per_copy=np.asarray(per_copy, dtype=np.float64),
                issue_s=self._copy_issue_s(ctx),
                issue_threads=1,
                issuer="host" if ctx.as_published else "pool",
            ),
        }

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU: partial keys of offloaded layers, two layers of prefetch buffers, whole KV of the others,
        partial query weights (fixed). Host: the KV of the offloaded layers."""
        d, dt, n_kv = model.head_dim, cfg.dtype_bytes, model.n_kv_heads
        ctx_tokens = cfg.max_context_tokens
        n_off = int(self.offloaded_layers(cfg, model).sum())
        n_gpu = model.n_layers - n_off
        per_token_layer = 2 * n_kv * d * dt
        partial_keys = n_off * ctx_tokens * n_kv * self.knobs.partial_ratio * d * dt
        buffers = 2 * min(cfg.budget_tokens, ctx_tokens) * per_token_layer
        weights = n_off * model.hidden_size * model.n_qo_heads * self.knobs.partial_ratio * d * dt
        return MemoryNeed(
            gpu_fixed_bytes=int(weights),
            gpu_per_seq_bytes=int(partial_keys + buffers + n_gpu * ctx_tokens * per_token_layer),
            host_per_seq_bytes=int(n_off * ctx_tokens * per_token_layer),
        )

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill; the prompt KV of offloaded layers goes to the host behind the next layer."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        m, cfg = ctx.model, ctx.cfg
        n_off = int(self.offloaded_layers(cfg, m).sum())
        layer_bytes = cfg.batch_size * cfg.input_tokens * 2 * m.n_kv_heads * m.head_dim * cfg.dtype_bytes
        parts["prefill_offload_exposed"] = prefill_offload_exposed_s(ctx, parts, layer_bytes, n_off)
        return parts


def published_cpu_gather_s(ctx: CostContext, rows: np.ndarray, kv_bytes: np.ndarray) -> np.ndarray:
    """Host seconds of InfiniGen's gather as its code runs it (as-published): two F.embedding calls on the
    host-resident cache, K and V, each of `rows` scattered rows of d elements (kv_selection_controller.py
    :23-24; a CPU index_select, torch_gather_row_s per row, measured by benchmarks/bench_host_gather.py),
    then the assignment of both results into the pinned `prefetch_kv` buffer (flex_opt.py:457: a host
    copy of the gathered `kv_bytes`, host_copy_s_per_gb) before the pinned buffer is copied to the GPU
    (flex_opt.py:461-465 -> pytorch_backend.py:873-877, the pinned path of general_copy). Each of the two
    passes takes at least its memory traffic (HOST_COPY_TRAFFIC x the bytes) at the host's memory
    bandwidth (host.memory_bandwidth_gbps), which binds on a host with little of it."""
    sw = ctx.software
    assert sw is not None
    rows = np.asarray(rows, dtype=np.float64)
    kv_bytes = np.asarray(kv_bytes, dtype=np.float64)
    # each pass reads, writes and write-allocates its bytes: never faster than the host's memory allows
    traffic_s = HOST_COPY_TRAFFIC * kv_bytes / (ctx.profile.host.memory_bandwidth_gbps * 1e9)
    gather_s = np.maximum(2.0 * rows * sw.torch_gather_row_s, traffic_s)
    copy_s = np.maximum(kv_bytes / 1e9 * sw.host_copy_s_per_gb, traffic_s)
    return gather_s + copy_s
