"""benchmarks/gpu_parts/microbench_selection.py on the CPU: the zero-copy gather kernel (Triton interpreter)
reads the right runs; the top-k shapes are ShadowKV's e2e.py cells. The timings themselves need a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_parts.microbench_selection import (  # noqa: E402
    TOPK_SHAPES,
    UVA_BLOCK_SHAPES,
    UVA_RUN_BYTES,
    gather_runs,
    gather_runs_per_block,
)


@pytest.mark.parametrize("run_words", [64, 512])
def test_gather_runs_copies_the_indexed_runs(run_words: int) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the interpreter path; the GPU suite exercises the compiled kernel")
    n_src = 40
    src = torch.randint(-(2**31), 2**31 - 1, (n_src * run_words,), dtype=torch.int32)
    run_ids = torch.tensor([39, 0, 17, 17, 5], dtype=torch.int32)  # repeats and both ends
    dst = torch.full((run_ids.numel() * run_words,), -1, dtype=torch.int32)
    gather_runs(src, run_ids, dst, run_words)
    expected = src.view(n_src, run_words)[run_ids.long()].reshape(-1)
    assert torch.equal(dst, expected)


def test_shapes_follow_shadowkv_e2e_cells() -> None:
    for label, rows, cols, k in TOPK_SHAPES:
        assert 0 < k < cols and rows > 0, label
    by_label = {s[0]: s[1:] for s in TOPK_SHAPES}
    assert by_label["shadowkv llama-3 60K b48"] == (48 * 8, 7680, 128)  # batch x KV heads, 60K / 8, 1024 / 8
    assert by_label["shadowkv glm-4 244K b12"] == (48, 31232, 512)
    assert 2048 in UVA_RUN_BYTES  # ShadowKV's value chunk: 8 tokens x 128 x bf16


def test_gather_runs_per_block_copies_each_blocks_runs_in_order() -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the interpreter path; the GPU suite exercises the compiled kernel")
    run_words, n_src = 64, 30
    src = torch.randint(-(2**31), 2**31 - 1, (n_src * run_words,), dtype=torch.int32)
    run_ids = torch.tensor([29, 3, 3, 0, 11, 7], dtype=torch.int32)  # 2 blocks x 3 runs
    expected = src.view(n_src, run_words)[run_ids.long()].reshape(-1)
    for in_flight in (1, 2, 4):  # 4 > 3 runs per block: the last group is masked
        dst = torch.full((run_ids.numel() * run_words,), -1, dtype=torch.int32)
        gather_runs_per_block(src, run_ids, dst, 3, run_words, in_flight)
        assert torch.equal(dst, expected), in_flight


def test_block_shapes_are_shadowkv_gather_grids() -> None:
    by_label = {s[0]: s[1:] for s in UVA_BLOCK_SHAPES}
    assert by_label["llama-3 60K b48"] == (384, 51)  # batch x KV heads; 40% of 1024 / 8 chunks missed
    assert by_label["glm-4 244K b12"] == (48, 204)
    assert all(blocks * runs * 2048 > 1 << 20 for blocks, runs in by_label.values())
