"""Decode ms/token of `full` and `freekv` on the real default model, and the cost of trace recording.

Usage: `.venv/bin/python benchmarks/bench_decode.py [--contexts 2048,4096,8192] [--steps 8]
[--device cpu] [--dtype float32]`.

Per (context, method): one prefill of `context` tokens of offline prose, then `steps` decode steps
without a recorder, then `steps` more with a `TraceRecorder` writing a real trace to a temporary
directory (the context grows by `steps` tokens in between, which is negligible at these lengths).
Reports wall-clock ms/token (CUDA-synchronised on a GPU) and the share added by recording. On the CPU
FreeKV runs the same algorithm synchronously: it is no latency estimate of FreeKV on a GPU (that is what
`sim` is for); it shows what a traced run costs on this machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from freekv_runtime.api import device_string, library_versions, resolve_device, resolve_dtype, runtime_dict
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import DecodeContext, Sampling, decode_one_token, prefill, sample
from freekv_runtime.model import ModelAdapter
from freekv_runtime.policies import make_policy
from freekv_runtime.recorder import TraceRecorder
from freekv_runtime.tasks.text import reference_prose
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model
from traces import RunMetadata, TraceWriter

KNOBS = RuntimeConfig(method="freekv", page_size=16, budget_tokens=1024, sink_tokens=64, window_tokens=64,
                      tau=0.9, dense_layers=(0,))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _decode_ms(ctx: DecodeContext, token: torch.Tensor, start: int, steps: int) -> tuple[float, torch.Tensor]:
    _sync(ctx.adapter.device)
    t0 = time.perf_counter()
    for i in range(steps):
        logits = decode_one_token(ctx, token, start + i)
        token = sample(logits, Sampling(), None)[:, None]
    _sync(ctx.adapter.device)
    return (time.perf_counter() - t0) / steps * 1e3, token


@torch.inference_mode()
def bench(context: int, method: str, steps: int, device: torch.device, dtype_name: str) -> dict[str, float]:
    loaded = load_model("smollm2-135m", device=device, dtype=resolve_dtype(dtype_name))
    adapter = ModelAdapter(loaded.model)
    ids = loaded.tokenizer(reference_prose(), add_special_tokens=False)["input_ids"][:context]
    prompt = torch.tensor([ids], device=device)  # (1, T)
    config = replace(KNOBS, method=method)
    timer = OpTimer(device)
    state = make_policy(config).new_state(adapter.shape, 1, device, loaded.dtype, timer)
    ctx = DecodeContext(adapter, state, adapter.rope_table(context + 2 * steps + 1), timer)
    t0 = time.perf_counter()
    token = sample(prefill(ctx, prompt), Sampling(), None)[:, None]  # (1, 1)
    _sync(device)
    prefill_s = time.perf_counter() - t0
    plain_ms, token = _decode_ms(ctx, token, context, steps)
    meta = RunMetadata(
        model=loaded.spec, runtime=runtime_dict(config, loaded.spec.n_layers, dtype_name),
        task={"name": "bench_decode", "context_tokens": context}, seeds={}, device=device_string(device),
        library_versions=library_versions(), timing_clock=timer.clock,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    with tempfile.TemporaryDirectory() as tmp, TraceWriter.create(Path(tmp) / "trace", meta) as writer:
        ctx.recorder = TraceRecorder(writer)
        traced_ms, _ = _decode_ms(ctx, token, context + steps, steps)
    return {"prefill_s": prefill_s, "decode_ms": plain_ms, "traced_ms": traced_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="2048,4096,8192")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    device = resolve_device(args.device)
    label = "GPU" if device.type == "cuda" else "CPU"
    print(f"decode ms/token, smollm2-135m {args.dtype}, {label}: {device_string(device)}")
    print(f"freekv knobs: {KNOBS.to_dict()}")
    print("| context | method | prefill s | decode ms/token | with trace ms/token | trace cost |")
    print("|---|---|---|---|---|---|")
    for context in (int(c) for c in args.contexts.split(",")):
        for method in ("full", "freekv"):
            r = bench(context, method, args.steps, device, args.dtype)
            cost = (r["traced_ms"] / r["decode_ms"] - 1) * 100
            print(f"| {context} | {method} | {r['prefill_s']:.1f} | {r['decode_ms']:.1f} | "
                  f"{r['traced_ms']:.1f} | {cost:+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
