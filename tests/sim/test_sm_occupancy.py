"""sim/sm_occupancy.py: blocks per SM by shared memory and the SM share a second kernel gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.sm_occupancy import RESERVED_SMEM_PER_BLOCK_BYTES, blocks_per_sm, co_runner_sm_share

A100_SMEM = 164 * 1024
GATHER = 32 * 2048 + 128 * 4 + 16  # ShadowKV's gather block at 128 chunks
GEMM = 5 * (128 * 32 + 32 * 128) * 2


def test_blocks_per_sm_counts_the_reserved_kilobyte() -> None:
    assert blocks_per_sm(GATHER, A100_SMEM) == 2  # 3 x (65,552 + 1,024) > 167,936
    assert blocks_per_sm(A100_SMEM - RESERVED_SMEM_PER_BLOCK_BYTES, A100_SMEM) == 1
    assert blocks_per_sm(A100_SMEM, A100_SMEM) == 0
    with pytest.raises(ValueError):
        blocks_per_sm(-1, A100_SMEM)


def test_a_grid_that_fills_every_sm_leaves_nothing() -> None:
    assert co_runner_sm_share(216, GATHER, GEMM, 108, A100_SMEM) == 0.0  # 2 per SM on all 108
    assert co_runner_sm_share(768, GATHER, GEMM, 108, A100_SMEM) == 0.0


def test_partial_grid_leaves_the_sms_holding_fewer_blocks() -> None:
    # 192 blocks on 108 SMs: 84 hold two (no room for an 80 KB CTA), 24 hold one (room)
    assert co_runner_sm_share(192, GATHER, GEMM, 108, A100_SMEM) == pytest.approx(24 / 108)
    assert co_runner_sm_share(96, GATHER, GEMM, 108, A100_SMEM) == 1.0  # one or none per SM
    assert co_runner_sm_share(0, GATHER, GEMM, 108, A100_SMEM) == 1.0
    # Ada (100 KB per SM): one gather block leaves no room for the GEMM's CTA
    assert co_runner_sm_share(100, GATHER, GEMM, 142, 100 * 1024) == pytest.approx(42 / 142)


@given(
    blocks=st.integers(0, 5000),
    first=st.integers(0, 120_000),
    second=st.integers(0, 120_000),
    sms=st.integers(1, 200),
)
def test_share_is_a_fraction_and_falls_as_the_first_grid_grows(
    blocks: int, first: int, second: int, sms: int
) -> None:
    share = co_runner_sm_share(blocks, first, second, sms, A100_SMEM)
    assert 0.0 <= share <= 1.0
    assert co_runner_sm_share(blocks + 1, first, second, sms, A100_SMEM) <= share
