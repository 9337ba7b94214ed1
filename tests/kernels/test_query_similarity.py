"""query_similarity: Triton (interpreter) vs reference, and the reference vs torch's cosine similarity."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import DTYPES, FP32_TOL, randn

from kernels import KernelInputError
from kernels.query_similarity import (
    query_similarity,
    query_similarity_cpu,
    query_similarity_reference,
    query_similarity_triton,
)


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("g,d,dtype", [(1, 16, "fp32"), (3, 24, "fp16"), (4, 64, "bf16"), (5, 8, "fp32"),
                                       (7, 32, "fp16"), (8, 128, "bf16")])
def test_triton_matches_reference(gen, g, d, dtype):
    dt = DTYPES[dtype]
    q = randn(gen, 3, 2 * g, d, dtype=dt)
    q_prev = (q.float() + 0.7 * randn(gen, 3, 2 * g, d)).to(dt)
    q_prev[0, 0] = 0  # zero vector: cosine 0 through the eps guard
    got = query_similarity_triton(q, q_prev, g)
    assert got.dtype == torch.float32 and got.shape == (3, 2)
    torch.testing.assert_close(got, query_similarity_reference(q, q_prev, g), **FP32_TOL)


@pytest.mark.parametrize("g", [1, 3, 8])
def test_reference_matches_torch_cosine(gen, g):
    q = randn(gen, 2, 3 * g, 16)
    q_prev = randn(gen, 2, 3 * g, 16)
    want = torch.nn.functional.cosine_similarity(q, q_prev, dim=-1).reshape(2, 3, g).mean(-1)
    torch.testing.assert_close(query_similarity_reference(q, q_prev, g), want, **FP32_TOL)


@pytest.mark.parametrize("g,d", [(1, 16), (3, 64), (4, 24), (7, 8)])
def test_cpu_loop_matches_reference(gen, g, d):
    """The compiled CPU loop (what the dispatcher runs for float32 CPU queries), zero vectors included."""
    q = randn(gen, 3, 2 * g, d)
    q_prev = q + 0.7 * randn(gen, 3, 2 * g, d)
    q_prev[0, 0] = 0
    torch.testing.assert_close(query_similarity_cpu(q, q_prev, g), query_similarity_reference(q, q_prev, g),
                               **FP32_TOL)
    torch.testing.assert_close(query_similarity(q, q_prev, g), query_similarity_reference(q, q_prev, g),
                               **FP32_TOL)


def test_identical_and_opposite_queries(gen):
    q = randn(gen, 2, 6, 16)
    torch.testing.assert_close(query_similarity(q, q, 3), torch.ones(2, 2))
    torch.testing.assert_close(query_similarity(q, -q, 3), -torch.ones(2, 2))


def test_bad_inputs_raise_clear_errors(gen):
    q = randn(gen, 2, 6, 16)
    with pytest.raises(KernelInputError, match="group_size"):
        query_similarity(q, q, 4)
    with pytest.raises(KernelInputError, match="one shape"):
        query_similarity(q, q[:, :3], 3)
