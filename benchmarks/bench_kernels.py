"""Benchmark the kernels: time per call and achieved bandwidth from an analytic byte count.

    .venv/bin/python benchmarks/bench_kernels.py                 # CPU: torch references, compiled loops
    .venv/bin/python benchmarks/bench_kernels.py --quick         # smaller shapes, fewer repetitions
    .venv/bin/python benchmarks/bench_kernels.py --device cuda   # references and compiled Triton kernels

Shapes follow Llama-3.1-8B (Hq 32, Hkv 8, d 128) with FreeKV's defaults (p 32, 2048-token budget = 64
pages per KV head) at a 32K-token context (1024 pages). Bytes count each input read once and each
output written once (the minimum traffic of the operation), so GB/s compares with the memory
bandwidth of the device. CPU rows time the torch references on this host's CPU (labelled "cpu") and,
where an op has one for the dtype, its compiled CPU loop (`<op>_cpu`, backend "cpu_loop"; the query
similarity takes float32 only, try `--dtype float32`); the Triton rows exist only on CUDA
(the Triton interpreter on CPU is a correctness tool, not timed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

import kernels


@dataclass(frozen=True)
class Case:
    op: str
    shape: str
    bytes_moved: int
    reference: Callable[[], object]
    triton: Callable[[], object]
    cpu_loop: Callable[[], object] | None = None  # the compiled CPU path, where it takes these inputs


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class _Inputs:
    """Random inputs on `device`, drawn in call order from one generator (so the cases are reproducible)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> None:
        self.device, self.dtype, self.gen = device, dtype, gen

    def rand(self, *shape: int, dt: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen).to(dt or self.dtype).to(self.device)

    def i32(self, values: torch.Tensor) -> torch.Tensor:
        return values.to(torch.int32).to(self.device)


def build_cases(device: torch.device, dtype: torch.dtype, gen: torch.Generator, quick: bool) -> list[Case]:
    b, hq, hkv, d, p = (1, 32, 8, 128, 32) if quick else (4, 32, 8, 128, 32)
    n_pages = 256 if quick else 1024  # candidate pages per sequence (8K / 32K tokens)
    budget_pages = 64
    inputs = _Inputs(device, dtype, gen)
    q = inputs.rand(b, hq, d)
    cases = _selection_cases(inputs, q, hkv, n_pages, budget_pages)
    n_slots = b * hkv * budget_pages
    k_cache, v_cache = inputs.rand(n_slots, p, hkv, d), inputs.rand(n_slots, p, hkv, d)
    cases.append(_attention_case(inputs, q, k_cache, v_cache, budget_pages))
    q_prev = inputs.rand(b, hq, d)
    g = hq // hkv
    f32_cpu = device.type == "cpu" and dtype == torch.float32
    cases.append(Case("query_similarity", f"b={b} Hq={hq} G={g} d={d}", _nbytes(q, q_prev) + b * hkv * 4,
                      lambda: kernels.query_similarity_reference(q, q_prev, g),
                      lambda: kernels.query_similarity_triton(q, q_prev, g),
                      (lambda: kernels.query_similarity_cpu(q, q_prev, g)) if f32_cpu else None))
    k_pages = inputs.rand(b * 64, p, hkv, d)
    summary_bytes = _nbytes(k_pages) + 2 * b * 64 * hkv * d * k_pages.element_size()
    cases.append(Case("summarize_pages", f"n={b * 64} p={p} Hkv={hkv} d={d}", summary_bytes,
                      lambda: kernels.summarize_pages_reference(k_pages),
                      lambda: kernels.summarize_pages_triton(k_pages)))
    cases.append(_recall_case(inputs, k_cache, v_cache, b * hkv * 16))
    k_page, v_page = inputs.rand(b, p, hkv, d), inputs.rand(b, p, hkv, d)
    cases.append(Case("offload_nhd_to_hnd", f"n={b} p={p} Hkv={hkv} d={d}", 2 * _nbytes(k_page, v_page),
                      lambda: kernels.offload_nhd_to_hnd(k_page, v_page),
                      lambda: kernels.offload_nhd_to_hnd(k_page, v_page)))  # torch on every device
    return cases


def _selection_cases(
    inputs: _Inputs, q: torch.Tensor, hkv: int, n_pages: int, budget_pages: int
) -> list[Case]:
    """page_scores over n_pages candidate pages and topk_pages of their scores."""
    b, hq, d = q.shape
    a, c = inputs.rand(b, hkv, n_pages, d), inputs.rand(b, hkv, n_pages, d)
    kmin, kmax = torch.minimum(a, c), torch.maximum(a, c)
    lo = inputs.i32(torch.full((b,), 16))
    hi = inputs.i32(torch.full((b,), n_pages - 16))
    scores = kernels.page_scores_reference(q, kmin, kmax, lo, hi)
    shape = f"b={b} Hq={hq} Hkv={hkv} P={n_pages} d={d}"
    k = budget_pages - 32  # selected pages: budget minus sink and window (FreeKV defaults)
    top = kernels.topk_pages_reference(scores, k)
    cpu = inputs.device.type == "cpu"
    return [
        Case("page_scores", shape, _nbytes(q, kmin, kmax, scores),
             lambda: kernels.page_scores_reference(q, kmin, kmax, lo, hi),
             lambda: kernels.page_scores_triton(q, kmin, kmax, lo, hi)),
        Case("topk_pages", f"b={b} Hkv={hkv} P={n_pages} k={k}", _nbytes(scores, top),
             lambda: kernels.topk_pages_reference(scores, k),
             lambda: kernels.topk_pages_triton(scores, k),
             (lambda: kernels.topk_pages_cpu(scores, k)) if cpu else None),
    ]


def _attention_case(
    inputs: _Inputs, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, budget_pages: int
) -> Case:
    """sparse_decode_attention over budget_pages random slots per (b, KV head), the last page half full."""
    b, hq, d = q.shape
    n_slots, p, hkv, _ = k_cache.shape
    table = inputs.i32(torch.randperm(n_slots, generator=inputs.gen).reshape(b, hkv, budget_pages))
    n_listed = inputs.i32(torch.full((b, hkv), budget_pages))
    last = inputs.i32(torch.full((b,), p // 2))
    tokens = b * hkv * ((budget_pages - 1) * p + p // 2)
    attn_bytes = 2 * tokens * d * k_cache.element_size() + _nbytes(q, q, table)
    return Case("sparse_decode_attention", f"b={b} Hq={hq} Hkv={hkv} pages={budget_pages} p={p} d={d}",
                attn_bytes,
                lambda: kernels.sparse_decode_attention_reference(q, k_cache, v_cache, table, n_listed, last),
                lambda: kernels.sparse_decode_attention_triton(q, k_cache, v_cache, table, n_listed, last))


def _recall_case(inputs: _Inputs, k_cache: torch.Tensor, v_cache: torch.Tensor, n_recall: int) -> Case:
    """recall_hnd_to_nhd of n_recall staged (slot, KV head) pages into the caches."""
    n_slots, p, hkv, d = k_cache.shape
    staging = inputs.rand(n_recall, 2, p, d)
    pairs = torch.randperm(n_slots * hkv, generator=inputs.gen)[:n_recall]
    slots, heads = inputs.i32(pairs // hkv), inputs.i32(pairs % hkv)
    run_ids = torch.arange(n_recall).numpy()  # the CPU loop reads the runs in place (here: all of them)
    cpu = inputs.device.type == "cpu"
    return Case("recall_hnd_to_nhd", f"n={n_recall} p={p} d={d}", 2 * _nbytes(staging),
                lambda: kernels.recall_hnd_to_nhd_reference(staging, heads, slots, k_cache, v_cache),
                lambda: kernels.recall_hnd_to_nhd_triton(staging, heads, slots, k_cache, v_cache),
                (lambda: kernels.recall_runs_cpu(staging, run_ids, heads.numpy(), slots.numpy(),
                                                 k_cache, v_cache)) if cpu else None)


def time_call(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median seconds per call after one warm-up call (CUDA events on a GPU, wall clock on the CPU)."""
    fn()
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per case (default 20, quick 5)")
    parser.add_argument("--quick", action="store_true", help="smaller shapes (8K context, batch 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available on this machine")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    reps = args.reps or (5 if args.quick else 20)
    gen = torch.Generator().manual_seed(args.seed)
    cases = build_cases(device, getattr(torch, args.dtype), gen, args.quick)
    backends = ["reference", "triton"] if use_cuda else ["reference", "cpu_loop"]
    label = torch.cuda.get_device_name(device) if use_cuda else f"cpu ({torch.get_num_threads()} threads)"
    print(f"device: {label}; dtype {args.dtype}; median of {reps} calls; GB/s from analytic bytes")
    header = f"{'op':<24} {'backend':<9} {'device':<6} {'shape':<44} {'time_us':>10} {'GB/s':>8}"
    print(header)
    print("-" * len(header))
    for case in cases:
        for backend in backends:
            if getattr(case, backend) is None:
                continue
            seconds = time_call(getattr(case, backend), device, reps)
            gbps = case.bytes_moved / seconds / 1e9
            print(f"{case.op:<24} {backend:<9} {device.type:<6} {case.shape:<44} {seconds * 1e6:>10.1f} "
                  f"{gbps:>8.2f}")


if __name__ == "__main__":
    main()
