"""Compile every Triton kernel of `kernels` for NVIDIA GPUs on a machine without one (ahead of time).

Each case calls a real host wrapper on CPU tensors with its kernel replaced by a recorder of the launch
arguments; the arguments give the kernel's signature (pointer dtypes, scalar types, constexpr values),
which `triton.compile` lowers to PTX and a cubin for the target (ptxas ships with triton). This checks
that the kernels compile (tl.dot shapes, types, constexpr branches) and reports registers and spills;
it does not run them. Run in a process where TRITON_INTERPRET is unset:

    .venv/bin/python tests/kernels/compile_check.py [--arch 80 90]
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32",
                torch.int64: "i64"}


class LaunchRecorder:
    """Stands in for a @triton.jit kernel during one wrapper call: `kernel[grid](*args, **kwargs)`."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((args, kwargs))

        return launch


def _signature(kernel, args: tuple, kwargs: dict) -> tuple[dict[str, str], dict[str, object]]:
    names = [p.name for p in kernel.params]
    constexpr_names = {p.name for p in kernel.params if p.is_constexpr}
    values = dict(zip(names, args, strict=False)) | kwargs
    signature, constexprs = {}, {}
    for name in names:
        value = values[name]
        if name in constexpr_names:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + TRITON_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        else:
            signature[name] = "fp32"
    return signature, constexprs


def _resource_usage(cubin: bytes) -> str:
    """'REG:.. STACK:.. SHARED:.. LOCAL:..' from cuobjdump (empty if the tool is unavailable)."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
    lines = [ln.strip() for ln in out.splitlines() if "REG:" in ln]
    return lines[0].replace("Resource usage:", "").strip() if lines else ""


def _cases() -> list[tuple[str, str, tuple[str, ...], Callable[[], object]]]:
    """(label, module, kernel attribute names, wrapper call) with Llama-3.1-8B-like shapes."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen).to(dtype)

    def i32(*values):
        return torch.tensor(values, dtype=torch.int32)

    import kernels as k

    b, hq, hkv, d, p, n_pages = 2, 32, 8, 128, 32, 64
    q = rand(b, hq, d)
    kmin, kmax = rand(b, hkv, 300, d), rand(b, hkv, 300, d)
    kmin, kmax = torch.minimum(kmin, kmax), torch.maximum(kmin, kmax)
    kc, vc = rand(b * hkv * n_pages, p, hkv, d), rand(b * hkv * n_pages, p, hkv, d)
    table = torch.arange(b * hkv * n_pages, dtype=torch.int32).reshape(b, hkv, n_pages)
    n_listed = torch.full((b, hkv), n_pages, dtype=torch.int32)
    scores = torch.randn(b, hkv, 1024, generator=gen)
    staging = rand(16, 2, p, d)
    ids = torch.arange(16, dtype=torch.int32)
    mod_attn = "kernels.sparse_decode_attention"
    kernels_attn = ("_sparse_decode_kernel", "_combine_splits_kernel")
    return [
        ("page_scores bf16 mean", "kernels.page_scores", ("_page_scores_kernel",),
         lambda: k.page_scores_triton(q, kmin, kmax, i32(4, 0), i32(290, 300))),
        ("page_scores fp32 max G=5", "kernels.page_scores", ("_page_scores_kernel",),
         lambda: k.page_scores_triton(rand(1, 40, d, dtype=torch.float32), kmin[:1].float(), kmax[:1].float(),
                                      i32(0), i32(300), "max")),
        ("query_page_scores bf16 G=4", "kernels.page_scores", ("_page_scores_kernel",),
         lambda: k.query_page_scores_triton(q, kmin, kmax, i32(4, 0), i32(290, 300))),
        ("topk_pages P=1024 k=32", "kernels.topk_pages", ("_topk_pages_kernel",),
         lambda: k.topk_pages_triton(scores, 32)),
        ("topk_pages P=MAX_TRITON_PAGES k=64", "kernels.topk_pages", ("_topk_pages_kernel",),
         lambda: k.topk_pages_triton(torch.randn(1, 2, k.MAX_TRITON_PAGES, generator=gen), 64)),
        ("sparse_decode bf16 G=4 p=32", mod_attn, kernels_attn,
         lambda: k.sparse_decode_attention_triton(q, kc, vc, table, n_listed, i32(5, 32), num_splits=1)),
        ("sparse_decode bf16 G=4 p=32 split=8 lse", mod_attn, kernels_attn,
         lambda: k.sparse_decode_attention_triton(q, kc, vc, table, n_listed, i32(5, 32), return_lse=True,
                                                  num_splits=8)),
        ("sparse_decode fp32 G=7 p=24 d=64", mod_attn, kernels_attn,
         lambda: k.sparse_decode_attention_triton(rand(1, 14, 64, dtype=torch.float32),
                                                  rand(8, 24, 2, 64, dtype=torch.float32),
                                                  rand(8, 24, 2, 64, dtype=torch.float32),
                                                  torch.arange(8, dtype=torch.int32).reshape(1, 2, 4),
                                                  torch.full((1, 2), 4, dtype=torch.int32), i32(7),
                                                  num_splits=1)),
        ("sparse_decode bf16 per query head p=32 split=4", mod_attn, kernels_attn,
         lambda: k.sparse_decode_attention_triton(q, kc, vc, table.repeat_interleave(4, dim=1).contiguous(),
                                                  n_listed.repeat_interleave(4, dim=1).contiguous(),
                                                  i32(5, 32), num_splits=4)),
        ("query_similarity bf16 G=4", "kernels.query_similarity", ("_query_similarity_kernel",),
         lambda: k.query_similarity_triton(q, q, 4)),
        ("summarize_pages bf16 p=32", "kernels.summarize_pages", ("_summarize_pages_kernel",),
         lambda: k.summarize_pages_triton(kc[:16], 7)),
        ("recall_hnd_to_nhd bf16 p=32", "kernels.recall", ("_recall_hnd_to_nhd_kernel",),
         lambda: k.recall_hnd_to_nhd_triton(staging, ids % hkv, ids, kc, vc)),
    ]


def compile_all(archs: list[int]) -> list[str]:
    """Compile every case for every arch; returns one report line per compiled kernel (raises on error)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("compile_check needs TRITON_INTERPRET unset (compiled-mode triton)")
    lines = []
    for label, module_name, attrs, call in _cases():
        module = importlib.import_module(module_name)
        originals = {a: getattr(module, a) for a in attrs}
        recorders = {a: LaunchRecorder() for a in attrs}
        try:
            for a, rec in recorders.items():
                setattr(module, a, rec)
            call()
        finally:
            for a, fn in originals.items():
                setattr(module, a, fn)
        for a, rec in recorders.items():
            for args, kwargs in rec.launches:
                signature, constexprs = _signature(originals[a], args, kwargs)
                for arch in archs:
                    t0 = time.perf_counter()
                    src = ASTSource(fn=originals[a], signature=signature, constexprs=constexprs)
                    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32))
                    usage = _resource_usage(compiled.asm["cubin"])
                    lines.append(f"sm_{arch} {label:<42} {a:<26} {time.perf_counter() - t0:6.1f}s  {usage}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compile the Triton kernels for NVIDIA GPUs, no GPU needed.")
    parser.add_argument("--arch", type=int, nargs="+", default=[90], help="compute capabilities, e.g. 80 90")
    args = parser.parse_args(argv)
    for line in compile_all(args.arch):
        print(line, flush=True)
    print("all kernels compiled")


if __name__ == "__main__":
    main()
