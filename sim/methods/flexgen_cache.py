"""FlexGen's KV cache in host memory, as its code moves it (the runtime InfiniGen is built on).

Source: Sheng et al., FlexGen (ICML 2023), as shipped in snu-comparch/InfiniGen at 3754f52 (speedup/
flexgen/original/ and speedup/flexgen/infinigen/, the baseline and InfiniGen of its speedup scripts).
With `--percent 100 0 0 100 100 0` (weights and activations on the GPU, the whole KV cache on the CPU)
and `--overlap false` (speedup/scripts/figure14-16/run.sh):

- The host cache is pageable: `init_cache_one_gpu_batch` allocates it with `pin_memory = False`
  ("disable pin_memory due to high memory overhead", original/pytorch_backend.py:287-296, infinigen/
  pytorch_backend.py:291-300), shape (prompt + gen - 1, batch x heads, head_dim): one layer's K (or V) is
  one contiguous block.
- Attention runs on the GPU: `cpu_cache_compute` is off (the flag `--cpu-cache-compute` is not given,
  original/flex_opt.py:1285, infinigen/flex_opt.py:1430), so `load_cache` takes path 0 ("Direct copy",
  original/flex_opt.py:338-368, infinigen/flex_opt.py:363-397): the layer's whole past K and V,
  `k_home.smart_copy(dst, indices)` with indices (0 : prompt_len + i, all heads), two copies per layer
  and step.
- `generation_loop_normal` (original/flex_opt.py:912-927; infinigen/flex_opt.py:1055-1075) runs per
  sub-layer load_cache, compute, `self.sync()` (torch.cuda.synchronize, original/flex_opt.py:793-795,
  infinigen/flex_opt.py:932-934), store_cache, all on the default stream with no overlap: the load
  precedes the sub-layer's compute.
- A copy from pageable memory goes through `general_copy`'s last branches (original/pytorch_backend.py
  :844-856: `dst.copy_(src, non_blocking=True)` from the pageable tensor; its `src.pin_memory()` relay is
  commented out at :850): the
  CUDA driver stages it through a pinned buffer and the call returns once the data is staged (CUDA
  Runtime API, "API synchronization behavior"): the host thread waits. Each staged chunk's DMA overlaps
  the next chunk's staging, so a copy takes the longer of the link time and the staging time (software
  profile `pageable_staging_s_per_gb`, one host thread's memcpy).
- Decode attention (`mha_gen`) lays K and V out for `bmm` with `permute(...).reshape(...)` of a
  non-contiguous view, one copy of each (`mha_gen_copies_s`). InfiniGen's (infinigen/pytorch_backend.py
  :381-437) first appends the new token with `torch.cat((k, k_new))` and `torch.cat((v, v_new))` (:431-432)
  before the permute-reshape (:435, :437): each of K and V is read and written twice
  (MHA_GEN_COPIES_INFINIGEN). FlexGen's own (original/pytorch_backend.py:368-427) writes the new token
  into the loaded buffer in place (`k[src_s - 1:src_s] = k_new`, :412-413) and then permute-reshapes
  (:416, :418): each is copied once (MHA_GEN_COPIES_FLEXGEN).
- `store_cache` writes the new token's K and V to the pageable cache (original/flex_opt.py:405-422 ->
  `general_copy`'s normal path, :852-856, for a one-token source): a device-to-host copy into pageable
  memory returns once complete, so the host waits.
"""

from __future__ import annotations

import numpy as np

from sim.methods.base import CostContext, Transfer

__all__ = [
    "MHA_GEN_COPIES_FLEXGEN",
    "MHA_GEN_COPIES_INFINIGEN",
    "mha_gen_copies_s",
    "pageable_copy_s",
    "pageable_transfer",
]

# whole copies of each of K and V that `mha_gen` makes before its bmm (module docstring)
MHA_GEN_COPIES_FLEXGEN = 1  # original/pytorch_backend.py:412-418: in-place append, permute-reshape
MHA_GEN_COPIES_INFINIGEN = 2  # infinigen/pytorch_backend.py:431-437: torch.cat, then permute-reshape


def pageable_copy_s(ctx: CostContext, bytes_per_copy: np.ndarray, direction: str) -> np.ndarray:
    """Seconds of one copy of `bytes_per_copy` between pageable host memory and the GPU (module docstring):
    as published, the longer of the link time (one contiguous run) and the driver's staging on one host
    thread; ideal, the link time (pinned)."""
    b = np.asarray(bytes_per_copy, dtype=np.float64)
    link_s = np.asarray(ctx.cost.copy_s(b, 1 << 40, direction), dtype=np.float64)
    if not ctx.as_published:
        return link_s
    sw = ctx.software
    assert sw is not None
    return np.maximum(link_s, b / 1e9 * sw.pageable_staging_s_per_gb)


def pageable_transfer(
    ctx: CostContext, direction: str, n_copies: np.ndarray, bytes_per_copy: np.ndarray
) -> Transfer:
    """`n_copies` (S, L) copies of `bytes_per_copy` (S, L) between the pageable cache and the GPU, issued by
    the main thread with a torch copy each (as published); the op that carries it should be a host sync
    (the caller waits for the staged copy)."""
    b = np.broadcast_to(np.asarray(bytes_per_copy, dtype=np.float64), ctx.shape)
    n = np.where(b > 0, np.asarray(n_copies), 0).astype(np.int64)
    sw = ctx.software
    issue_s = sw.torch_copy_call_s if (ctx.as_published and sw is not None) else ctx.profile.link.copy_issue_s
    return Transfer(
        direction=direction,  # type: ignore[arg-type]
        n_copies=n,
        copy_s=pageable_copy_s(ctx, b, direction),
        bytes_per_copy=b,
        issue_s=issue_s,
        issue_threads=1,
        issuer="host",
    )


def mha_gen_copies_s(ctx: CostContext, attended_tokens: np.ndarray, copies_per_tensor: int) -> np.ndarray:
    """(S, L) GPU seconds of `mha_gen`'s copies of the attended K and V over `attended_tokens` per
    (sequence, head), (S, L): `copies_per_tensor` whole copies (read + write) of each of K and V, one
    kernel each (module docstring: 2 in InfiniGen's mha_gen, 1 in FlexGen's)."""
    m, b = ctx.model, ctx.cfg.batch_size
    token_bytes = 2 * m.head_dim * ctx.cfg.dtype_bytes  # K and V of one token of one head
    kv_bytes = b * m.n_kv_heads * np.asarray(attended_tokens, dtype=np.float64) * token_bytes
    traffic = copies_per_tensor * 2 * kv_bytes  # each copy reads and writes the bytes
    return np.asarray(ctx.cost.kernel_s(0.0, traffic, 2 * copies_per_tensor), dtype=np.float64)
