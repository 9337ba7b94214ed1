"""GPU memory headroom (--gpu-memory-utilization) and per-model weight bytes in the memory model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.capacity import memory_at
from sim.config import DEFAULT_GPU_MEMORY_UTILIZATION, SimConfig
from sim.errors import SimInputError
from traces.models import get_model, use_model

_CFG = SimConfig(model="llama-3.1-8b", hardware="a100-80g-sxm", method="dense", input_tokens=4096,
                 output_tokens=256)


def test_usable_gpu_memory_is_the_utilization_share() -> None:
    assert DEFAULT_GPU_MEMORY_UTILIZATION == 0.9
    full = memory_at(_CFG.replace(gpu_memory_utilization=1.0))
    default = memory_at(_CFG)
    half = memory_at(_CFG.replace(gpu_memory_utilization=0.5))
    assert default.gpu_total_bytes == full.gpu_capacity_bytes == full.gpu_total_bytes
    assert default.gpu_capacity_bytes == int(0.9 * full.gpu_total_bytes)
    assert half.max_batch < default.max_batch < full.max_batch
    kv_per_seq = (4096 + 256) * get_model("llama-3.1-8b").kv_bytes_per_token()
    assert full.max_batch - default.max_batch >= int(0.1 * full.gpu_total_bytes) // (2 * kv_per_seq)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1, True])
def test_utilization_outside_0_1_is_refused(bad: object) -> None:
    with pytest.raises(SimInputError, match="gpu_memory_utilization"):
        _CFG.replace(gpu_memory_utilization=bad)


def test_bytes_per_param_prices_the_weights() -> None:
    spec = get_model("llama-3.1-8b")
    undo = use_model(replace(spec, bytes_per_param=1))
    try:
        fp8 = memory_at(_CFG)
    finally:
        undo()
    assert fp8.weights_bytes == spec.n_params()
    assert memory_at(_CFG).weights_bytes == 2 * spec.n_params()
