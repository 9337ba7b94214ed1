"""Decode ms/token of `dense` and `freekv` on the real default model, and the cost of trace recording.

Usage: `.venv/bin/python benchmarks/bench_decode.py [--contexts 2048,4096,8192] [--rounds 5] [--steps 4]
[--device cpu] [--dtype float32] [--tau 0.9]`.

Per context: one prefill of `context` tokens of offline prose for each method, then `rounds` rounds
in which each method decodes `steps` tokens without a recorder (the order alternates between rounds),
then as many rounds with a `TraceRecorder` writing a real trace to a temporary directory. Interleaving
the methods puts both under the same machine conditions (on shared 2-core machines the speed drifts by
tens of percent over a minute); the table gives the median over rounds of wall-clock ms/token
(CUDA-synchronised on a GPU), the median per-round ratio freekv / dense, and the share added by
recording (after one untimed step per method). The context grows by 2 x rounds x steps + 1 tokens over
the run, which is small at these lengths.
On the CPU FreeKV runs the same algorithm synchronously: it is no latency estimate of FreeKV on a GPU
(that is what `sim` is for); it shows what a traced run costs on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
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
from freekv_runtime.weights import LoadedModel, load_model
from traces import RunMetadata, TraceWriter

KNOBS = RuntimeConfig(method="freekv", page_size=16, budget_tokens=1024, sink_tokens=64, window_tokens=64,
                      dense_layers=(0,), knobs={"tau": 0.9})
METHODS = ("dense", "freekv")


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


@dataclass
class _Run:
    """One method's decode in progress: its context, next token and position."""

    ctx: DecodeContext
    token: torch.Tensor
    position: int
    prefill_s: float

    def decode_ms(self, steps: int) -> float:
        ms, self.token = _decode_ms(self.ctx, self.token, self.position, steps)
        self.position += steps
        return ms


def _start(loaded: LoadedModel, prompt: torch.Tensor, knobs: RuntimeConfig, max_tokens: int) -> _Run:
    adapter = ModelAdapter(loaded.model)
    device = adapter.device
    timer = OpTimer(device)
    policy = make_policy(knobs)
    policy.prepare(adapter)
    state = policy.new_state(adapter.shape, 1, device, loaded.dtype, timer)
    ctx = DecodeContext(adapter, state, adapter.rope_table(max_tokens), timer)
    t0 = time.perf_counter()
    token = sample(prefill(ctx, prompt), Sampling(), None)[:, None]  # (1, 1)
    _sync(device)
    return _Run(ctx, token, prompt.shape[1], time.perf_counter() - t0)


def _metadata(
    loaded: LoadedModel, knobs: RuntimeConfig, context: int, dtype_name: str, clock: str
) -> RunMetadata:
    return RunMetadata(
        model=loaded.spec,
        runtime=runtime_dict(knobs, loaded.spec.n_layers, dtype_name),
        task={"name": "bench_decode", "context_tokens": context}, seeds={},
        device=device_string(loaded.device),
        library_versions=library_versions(), timing_clock=clock,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _interleaved(runs: dict[str, _Run], rounds: int, steps: int) -> dict[str, list[float]]:
    """ms/token per method and round; the methods take turns, in alternating order."""
    out: dict[str, list[float]] = {method: [] for method in runs}
    for r in range(rounds):
        for method in METHODS[:: 1 if r % 2 == 0 else -1]:
            out[method].append(runs[method].decode_ms(steps))
    return out


@torch.inference_mode()
def bench(loaded: LoadedModel, knobs: RuntimeConfig, context: int, rounds: int, steps: int,
          dtype_name: str) -> dict[str, dict]:
    """Per method: prefill_s, plain and traced ms/token per round (interleaved with the other method)."""
    ids = loaded.tokenizer(reference_prose(), add_special_tokens=False)["input_ids"][:context]
    prompt = torch.tensor([ids], device=loaded.device)  # (1, T)
    max_tokens = context + 2 * rounds * steps + 2
    configs = {method: replace(knobs, method=method, knobs=knobs.knobs if method == knobs.method else {})
               for method in METHODS}
    runs = {method: _start(loaded, prompt, configs[method], max_tokens) for method in METHODS}
    for run in runs.values():  # one untimed step each: first-use work (compiled loops load) stays out
        run.decode_ms(1)
    plain = _interleaved(runs, rounds, steps)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        for method, run in runs.items():
            meta = _metadata(loaded, configs[method], context, dtype_name, run.ctx.timer.clock)
            writer = stack.enter_context(TraceWriter.create(Path(tmp) / method, meta))
            run.ctx.recorder = TraceRecorder(writer, page_size=configs[method].page_size)
        traced = _interleaved(runs, rounds, steps)
    return {m: {"prefill_s": runs[m].prefill_s, "plain": plain[m], "traced": traced[m]} for m in METHODS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="decode steps per method and round")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tau", type=float, default=KNOBS.knobs.tau,
                        help="FreeKV's correction threshold (the paper: 0.8 long input, 0.9 long generation)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    label = "GPU" if device.type == "cuda" else "CPU"
    loaded = load_model("smollm2-135m", device=device, dtype=resolve_dtype(args.dtype))
    print(f"decode ms/token, smollm2-135m {args.dtype}, {label}: {device_string(device)}, "
          f"{args.rounds} rounds x {args.steps} steps per method, medians over rounds")
    knobs = replace(KNOBS, knobs={"tau": args.tau})
    print(f"freekv knobs: {knobs.to_dict()}")
    print("| context | method | prefill s | decode ms/token | freekv / dense | with trace ms/token "
          "| trace cost |")
    print("|---|---|---|---|---|---|---|")
    for context in (int(c) for c in args.contexts.split(",")):
        r = bench(loaded, knobs, context, args.rounds, args.steps, args.dtype)
        pairs = zip(r["freekv"]["plain"], r["dense"]["plain"], strict=True)
        ratio = statistics.median(f / d for f, d in pairs)
        for method in METHODS:
            plain, traced = r[method]["plain"], r[method]["traced"]
            cost = (statistics.median(t / p for t, p in zip(traced, plain, strict=True)) - 1) * 100
            print(f"| {context} | {method} | {r[method]['prefill_s']:.1f} | {statistics.median(plain):.1f} | "
                  f"{ratio if method == 'freekv' else 1.0:.2f} | {statistics.median(traced):.1f} | "
                  f"{cost:+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
