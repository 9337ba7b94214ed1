"""Memory fit: GPU and host bytes a configuration needs, whether it fits and the largest batch that does.

GPU = weights (n_params * dtype bytes) + CUDA context + prefill transient (one layer's intermediates
for one prefill chunk) + the method's fixed KV state (staging buffers) + batch * (method KV state per
sequence at the longest context + decode activations per sequence). Host = batch * the method's host
KV per sequence (pinned pool). Model choices, stated: CUDA context and library workspaces 512 MiB
(the usual footprint of a CUDA 12 PyTorch process before any tensor, as shown by nvidia-smi); prefill
processed in chunks of at most 8192 tokens per sequence, one sequence at a time.

Headroom: only `cfg.gpu_memory_utilization` of the GPU's memory is usable (default 0.9, vLLM's
--gpu-memory-utilization default: the engine sizes weights + activations + KV to that share and leaves the
rest to the CUDA allocator's fragmentation, NCCL and other processes); `gpu_capacity_bytes` is that usable
share, `gpu_total_bytes` the profile's memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sim.config import SimConfig
from sim.hardware import HardwareProfile
from sim.methods.base import MemoryNeed
from traces.models import ModelSpec

__all__ = ["MemoryFit", "memory_fit", "CUDA_CONTEXT_BYTES", "PREFILL_CHUNK_TOKENS"]

CUDA_CONTEXT_BYTES = 512 * 2**20
PREFILL_CHUNK_TOKENS = 8192


@dataclass(frozen=True)
class MemoryFit:
    gpu_bytes: int
    host_bytes: int
    gpu_capacity_bytes: int  # usable: gpu_total_bytes x gpu_memory_utilization
    host_capacity_bytes: int
    weights_bytes: int
    kv_gpu_bytes: int
    activation_bytes: int
    fits: bool
    max_batch: int
    limit: str  # what bounds max_batch: "gpu", "host" or "none fits"
    gpu_total_bytes: int = 0
    gpu_memory_utilization: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def _activation_per_seq_bytes(cfg: SimConfig, model: ModelSpec) -> int:
    """Decode activations of one sequence: hidden states, QKV, FFN intermediates, fp32 logits."""
    h, f = model.hidden_size, model.ffn_size
    return (4 * h + 3 * f) * cfg.dtype_bytes + 4 * model.vocab_size


def _prefill_transient_bytes(cfg: SimConfig, model: ModelSpec) -> int:
    t = min(cfg.input_tokens, PREFILL_CHUNK_TOKENS)
    return t * (3 * model.hidden_size + 2 * model.ffn_size) * cfg.dtype_bytes


def memory_fit(need: MemoryNeed, cfg: SimConfig, model: ModelSpec, profile: HardwareProfile) -> MemoryFit:
    """Bytes needed by `cfg.batch_size` sequences and the largest batch that fits on `profile`."""
    weights = model.n_params() * (model.bytes_per_param or cfg.dtype_bytes)
    fixed = weights + CUDA_CONTEXT_BYTES + _prefill_transient_bytes(cfg, model) + need.gpu_fixed_bytes
    per_seq = need.gpu_per_seq_bytes + _activation_per_seq_bytes(cfg, model)
    b = cfg.batch_size
    gpu = fixed + b * per_seq
    host = b * need.host_per_seq_bytes
    gpu_total, host_cap = profile.gpu.memory_bytes, profile.host.memory_bytes
    gpu_cap = int(gpu_total * cfg.gpu_memory_utilization)
    by_gpu = max(0, (gpu_cap - fixed) // per_seq) if per_seq else 1 << 30
    by_host = host_cap // need.host_per_seq_bytes if need.host_per_seq_bytes else 1 << 30
    max_batch = int(min(by_gpu, by_host))
    limit = "none fits" if max_batch == 0 else ("gpu" if by_gpu <= by_host else "host")
    return MemoryFit(
        gpu_bytes=int(gpu),
        host_bytes=int(host),
        gpu_capacity_bytes=int(gpu_cap),
        host_capacity_bytes=int(host_cap),
        weights_bytes=int(weights),
        kv_gpu_bytes=int(need.gpu_fixed_bytes + b * need.gpu_per_seq_bytes),
        activation_bytes=int(
            b * _activation_per_seq_bytes(cfg, model) + _prefill_transient_bytes(cfg, model)
        ),
        fits=bool(gpu <= gpu_cap and host <= host_cap),
        max_batch=max_batch,
        limit=limit,
        gpu_total_bytes=int(gpu_total),
        gpu_memory_utilization=float(cfg.gpu_memory_utilization),
    )
