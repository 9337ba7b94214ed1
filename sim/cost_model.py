"""Cost of each operation from first principles: roofline for GPU kernels, link model for copies.

GPU kernel: `launches * kernel_launch_s + max(flops / (peak * compute_fraction),
bytes / (hbm * bandwidth_fraction))`. Copy: `dma_latency_s + bytes / (effective_bw * efficiency(run))`
on the copy engine plus `copy_issue_s` on a host thread (sim.hardware.HostLinkSpec). Nothing here is
fitted to a published speedup; kernel counts follow a plain Llama/Qwen2 decoder layer (below).

Shapes: B = batch (sequences), Hq / Hkv query / KV heads, d head dim, h hidden size, f FFN size.
Work arrays may be numpy arrays of any shape (typically (S, L)); results broadcast accordingly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.hardware import HardwareProfile
from traces.models import ModelSpec

__all__ = ["CostModel", "transfer_duration_s", "KERNELS"]

# Kernel launches per operation of one decoder layer (plain HF-style Llama/Qwen2 layer with a fused
# QKV GEMM and fused gate/up GEMM, as in FlashInfer-based runtimes such as the FreeKV code):
KERNELS = {
    "qkv": 4,  # input RMSNorm, fused QKV GEMM, RoPE, append K/V to the current page
    "out_proj": 2,  # output GEMM, residual add
    "ffn": 5,  # post-attention RMSNorm, gate+up GEMM, SiLU*mul, down GEMM, residual add
    "attention": 1,  # paged decode attention over a page table
    "check": 1,  # group-mean cosine similarity of q_t and q_{t-1}, compare with tau
    "select": 4,  # page scores, group softmax-mean pooling, top-k, hit marking / eviction
    "lm_head": 3,  # final RMSNorm, LM-head GEMM, sampling
    "convert": 1,  # HND -> NHD scatter of one staging buffer
    "offload": 2,  # NHD -> HND transpose of the completed page, its min/max summary
}


@dataclass(frozen=True)
class CostModel:
    """Durations of the operations of one decode layer for `batch` sequences on `profile`."""

    model: ModelSpec
    profile: HardwareProfile
    batch: int
    dtype_bytes: int = 2

    # ----- primitives -----
    @property
    def hbm_bytes_per_s(self) -> float:
        gpu = self.profile.gpu
        return gpu.hbm_bandwidth_gbps * 1e9 * gpu.achievable_bandwidth_fraction

    @property
    def flops_per_s(self) -> float:
        gpu = self.profile.gpu
        return gpu.peak_fp16_tflops * 1e12 * gpu.achievable_compute_fraction

    def kernel_s(self, flops: float | np.ndarray, n_bytes: float | np.ndarray, launches: int = 1):
        """Roofline time of `launches` kernels doing `flops` and moving `n_bytes` of HBM traffic."""
        return launches * self.profile.gpu.kernel_launch_s + np.maximum(
            np.asarray(flops, dtype=np.float64) / self.flops_per_s,
            np.asarray(n_bytes, dtype=np.float64) / self.hbm_bytes_per_s,
        )

    def gemm_s(self, m: int, k: int, n: int, launches: int = 1) -> float:
        """(m, k) x (k, n) GEMM: 2mkn FLOPs, reads both operands and writes the result once."""
        flops = 2.0 * m * k * n
        weight_bytes = self.model.bytes_per_param or self.dtype_bytes  # the (k, n) operand is a weight
        n_bytes = (m * k + m * n) * self.dtype_bytes + k * n * weight_bytes
        return float(self.kernel_s(flops, n_bytes, launches))

    # ----- per-layer decode operations (B tokens, one per sequence) -----
    def qkv_s(self) -> float:
        m, d = self.model, self.model.head_dim
        width = (m.n_qo_heads + 2 * m.n_kv_heads) * d
        gemm = self.gemm_s(self.batch, m.hidden_size, width)
        elementwise = self.batch * (2 * m.hidden_size + 2 * width) * self.dtype_bytes
        return gemm + float(self.kernel_s(0.0, elementwise, KERNELS["qkv"] - 1))

    def out_proj_s(self) -> float:
        m = self.model
        gemm = self.gemm_s(self.batch, m.n_qo_heads * m.head_dim, m.hidden_size)
        return gemm + float(self.kernel_s(0.0, 3 * self.batch * m.hidden_size * self.dtype_bytes, 1))

    def ffn_s(self) -> float:
        m, b = self.model, self.batch
        up = self.gemm_s(b, m.hidden_size, 2 * m.ffn_size)
        down = self.gemm_s(b, m.ffn_size, m.hidden_size)
        elementwise = b * (5 * m.hidden_size + 3 * m.ffn_size) * self.dtype_bytes
        return up + down + float(self.kernel_s(0.0, elementwise, KERNELS["ffn"] - 2))

    def lm_head_s(self) -> float:
        m = self.model
        gemm = self.gemm_s(self.batch, m.hidden_size, m.vocab_size)
        return gemm + float(self.kernel_s(0.0, self.batch * m.vocab_size * 4, KERNELS["lm_head"] - 1))

    def attention_s(self, tokens_per_head: float | np.ndarray, seqs: int | None = None):
        """Decode attention of `seqs` (default: batch) sequences, each KV head over `tokens_per_head`."""
        m, b = self.model, self.batch if seqs is None else seqs
        t = np.asarray(tokens_per_head, dtype=np.float64)
        n_bytes = b * m.n_kv_heads * t * 2 * m.head_dim * self.dtype_bytes
        n_bytes = n_bytes + 2 * b * m.n_qo_heads * m.head_dim * self.dtype_bytes
        flops = 4.0 * b * m.n_qo_heads * t * m.head_dim
        return self.kernel_s(flops, n_bytes, KERNELS["attention"])

    def check_s(self) -> float:
        """Group cosine similarity of this and the last query (the host read-back is a host sync)."""
        m = self.model
        n_bytes = 2 * self.batch * m.n_qo_heads * m.head_dim * self.dtype_bytes
        return float(self.kernel_s(3.0 * self.batch * m.n_qo_heads * m.head_dim, n_bytes, KERNELS["check"]))

    def select_s(self, pages_per_head: float | np.ndarray):
        """Selection over `pages_per_head` candidate pages per (sequence, KV head): reads every summary."""
        m, b = self.model, self.batch
        pages = np.asarray(pages_per_head, dtype=np.float64)
        summaries = b * m.n_kv_heads * pages * 2 * m.head_dim * self.dtype_bytes
        scores = b * m.n_qo_heads * pages * 4  # fp32 scores written then read by pooling and top-k
        flops = 4.0 * b * m.n_qo_heads * pages * m.head_dim
        return self.kernel_s(flops, summaries + 3 * scores, KERNELS["select"])

    def convert_per_copy_s(self, copy_bytes: int) -> float:
        """HBM time to move one recalled run from staging into the NHD cache (read + write)."""
        return 2.0 * copy_bytes / self.hbm_bytes_per_s

    def page_bytes_per_head(self, page_size: int) -> int:
        """K and V of one page of one KV head: 2 * p * d elements."""
        return 2 * page_size * self.model.head_dim * self.dtype_bytes

    def offload_kernel_s(self, page_size: int) -> float:
        """Transpose NHD->HND and summarise one completed page of every KV head of every sequence."""
        n_bytes = 3 * self.batch * self.model.n_kv_heads * self.page_bytes_per_head(page_size)
        return float(self.kernel_s(0.0, n_bytes, KERNELS["offload"]))

    def copy_s(self, n_bytes: float | np.ndarray, run_bytes: int, direction: str):
        """Copy-engine time of copies of `n_bytes` made of contiguous runs of `run_bytes`."""
        link = self.profile.link
        bw = link.effective_gbps(direction) * 1e9 * link.efficiency(max(1, int(run_bytes)))
        n = np.asarray(n_bytes, dtype=np.float64)
        return np.where(n > 0, link.dma_latency_s + n / bw, 0.0)

    # ----- prefill -----
    def dense_prefill_s(self, prompt_tokens: int) -> dict[str, float]:
        """Dense prefill of `prompt_tokens` per sequence for the batch, by operation (whole model)."""
        m, b, t = self.model, self.batch, prompt_tokens
        tokens = b * t
        d = m.head_dim
        qkv = self.gemm_s(tokens, m.hidden_size, (m.n_qo_heads + 2 * m.n_kv_heads) * d, KERNELS["qkv"])
        out = self.gemm_s(tokens, m.n_qo_heads * d, m.hidden_size, KERNELS["out_proj"])
        ffn = self.gemm_s(tokens, m.hidden_size, 2 * m.ffn_size, 3) + self.gemm_s(
            tokens, m.ffn_size, m.hidden_size, 2
        )
        attn_flops = 4.0 * b * m.n_qo_heads * d * t * (t + 1) / 2  # causal: half the score matrix
        attn_bytes = b * (m.n_qo_heads + 2 * m.n_kv_heads) * t * d * self.dtype_bytes * 2
        attention = float(self.kernel_s(attn_flops, attn_bytes, 1))
        lm_head = self.gemm_s(b, m.hidden_size, m.vocab_size, KERNELS["lm_head"])
        n = m.n_layers
        return {
            "prefill_qkv": n * qkv,
            "prefill_attention": n * attention,
            "prefill_out_proj": n * out,
            "prefill_ffn": n * ffn,
            "prefill_lm_head": lm_head,
        }


def transfer_duration_s(
    n_copies: np.ndarray,
    copy_s: float | np.ndarray,
    issue_s: float,
    issue_threads: int,
    chunk_copies: int = 0,
    buffers: int = 0,
    convert_fixed_s: float = 0.0,
    convert_per_copy_s: float = 0.0,
) -> np.ndarray:
    """Closed form of one Transfer's pipeline alone (sim/methods/base.py): first issue to last end.

    Copy j (0-based) is issued at a_j = (floor(j / T) + 1) * issue_s (T threads, in order); the copies
    move in order, each `copy_s`: f_j = max(f_{j-1}, a_j, buffer free) + copy_s; with staging a
    conversion per filled buffer (sim/transfer_forms.py, which this evaluates with both origins at 0).
    Sharing of copy engines and link between transfers is not included (sim/copy_engines.py).
    n_copies: any shape; copy_s scalar or the same shape. Returns float64 of n_copies' shape.
    """
    from sim.transfer_forms import transfer_phases

    ph = transfer_phases(
        n_copies, copy_s, issue_s, issue_threads, chunk_copies, buffers, convert_fixed_s, convert_per_copy_s
    )
    return np.maximum(np.maximum(ph[2], ph[3]), np.maximum(ph[0], ph[1])) + ph[4]
