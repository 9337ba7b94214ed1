"""Streaming-multiprocessor occupancy by shared memory: how many blocks of a kernel one SM holds, and the
share of the SMs a second kernel (another stream) can use while a first kernel is still running.

Facts used:
- Resident blocks per SM are limited by shared memory: each block takes its dynamic shared memory plus
  1 KB the system reserves per block (CUDA C++ Programming Guide, "Compute Capabilities": 1 KB reserved
  per thread block on compute capability 8.x and 9.x), out of `gpu.shared_memory_per_sm_bytes`.
- Concurrent kernels share SMs under NVIDIA's "left-over" policy: the block scheduler dispatches a later
  kernel's blocks only onto the resources left once every block of the earlier kernel has been dispatched
  (Pai, Thazhuthaveetil and Govindarajan, "Improving GPGPU Concurrency with Elastic Kernels", ASPLOS
  2013; Xu et al., "Warped-Slicer", ISCA 2016, both describing the policy of NVIDIA's hardware).
- Assumed, not sourced: the blocks of a grid that fits at once are spread evenly over the SMs (one block
  per SM, then a second, ...). None of this has been measured on a GPU here.

Thread and register limits are not modelled: the kernels this is used for are limited by shared memory
(sim/methods/shadowkv.py names them). Pure arithmetic, no torch.
"""

from __future__ import annotations

__all__ = ["RESERVED_SMEM_PER_BLOCK_BYTES", "blocks_per_sm", "co_runner_sm_share"]

RESERVED_SMEM_PER_BLOCK_BYTES = 1024  # CUDA C++ Programming Guide: 1 KB per block (cc 8.x, 9.x)


def blocks_per_sm(block_smem_bytes: int, smem_per_sm_bytes: int) -> int:
    """Blocks of `block_smem_bytes` dynamic shared memory one SM holds at once (0: none fits)."""
    if block_smem_bytes < 0 or smem_per_sm_bytes <= 0:
        raise ValueError("shared memory sizes must be >= 0 (block) and > 0 (SM)")
    return smem_per_sm_bytes // (block_smem_bytes + RESERVED_SMEM_PER_BLOCK_BYTES)


def co_runner_sm_share(
    first_grid_blocks: int,
    first_block_smem_bytes: int,
    second_block_smem_bytes: int,
    sm_count: int,
    smem_per_sm_bytes: int,
) -> float:
    """Share of the SMs on which a block of a second kernel fits while the first kernel runs.

    0.0 when the first kernel's grid fills every SM: it has more blocks than fit at once (the second
    kernel then gets SMs only after the first's last wave has been dispatched: treat it as waiting for
    the first), or every SM's left-over shared memory is too small for one block of the second.
    Otherwise the first grid is spread evenly over the SMs and the share is that of SMs whose left-over
    shared memory holds at least one block of the second kernel.
    """
    if first_grid_blocks < 0 or sm_count <= 0:
        raise ValueError("first_grid_blocks must be >= 0 and sm_count > 0")
    if first_grid_blocks == 0:
        return 1.0
    per_sm = blocks_per_sm(first_block_smem_bytes, smem_per_sm_bytes)
    if first_grid_blocks >= per_sm * sm_count:
        return 0.0
    low = first_grid_blocks // sm_count  # blocks on most SMs; `extra` SMs hold one more
    extra = first_grid_blocks % sm_count
    used = first_block_smem_bytes + RESERVED_SMEM_PER_BLOCK_BYTES
    need = second_block_smem_bytes + RESERVED_SMEM_PER_BLOCK_BYTES
    fits_low = smem_per_sm_bytes - low * used >= need
    fits_high = smem_per_sm_bytes - (low + 1) * used >= need
    usable = (sm_count - extra) * fits_low + extra * fits_high
    return usable / sm_count
