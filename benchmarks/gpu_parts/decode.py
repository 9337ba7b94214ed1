"""Part `decode`: the suite's --methods (default `dense` and `freekv`) decode on the Llama-3.1-8B shape
with random weights, bf16.

Per (context, batch, method[, tau]): a fresh policy state is filled. Dense and FreeKV: through the
policy's own prefill with `context` tokens of random K/V per layer and one query (the prefill's
attention output is not needed to time decode, and a 64K-token batch-4 prefill through the model would
not fit beside the full cache). Every other policy: the model's own prefill of `context` random tokens,
because peers need what only a real prefill gives them (the prompt's queries for SnapKV/H2O/TOVA-style
votes, the pre-RoPE layer inputs for ShadowKV); each row says which (`fill`). Then 2 untimed steps;
`steps` timed steps (wall clock around each step, CUDA-synchronised, per-op timing events off);
min(steps, 8) steps recorded into a trace with the per-operation CUDA-event timings on (their wall time
too: `ms_per_token_with_op_timing`); 3 steps under the torch profiler (a CUDA timeline of kernels and
copies, kept compact in timeline.json.gz, from which timeline.py derives the recall bandwidth and the
recall/compute overlap). FreeKV knobs as the paper: B=2048, S=W=512, p=32, layer 0 dense; every other
policy runs at the same retrieval knobs and its own method knobs' defaults. Rows land in
DIR/decode/table.json and table.md after every configuration; an out-of-memory or other error is
recorded in its row and the next one runs.

Without CUDA: a CPU smoke run of the same code (smollm2-135m's shape cut to 2 layers, 1K context,
float32, small knobs), labelled as such, and the part is reported skipped.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from gpu_parts.common import Options, cuda_skip_reason, has_cuda, write_json
from gpu_parts.decode_profile import PROFILE_STEPS, profile_steps

__all__ = ["run", "DecodeSetup", "markdown_table"]

WARMUP_STEPS = 2
RANDOM_KV_FILL = ("dense", "freekv")  # filled by their own prefill of random K/V (the module docstring)


@dataclass(frozen=True)
class DecodeSetup:
    model: str
    layers: int | None
    dtype: torch.dtype
    knobs: dict[str, Any]
    label: str


GPU_SETUP = DecodeSetup(
    "llama-3.1-8b",
    None,
    torch.bfloat16,
    dict(page_size=32, budget_tokens=2048, sink_tokens=512, window_tokens=512),
    "GPU: Llama-3.1-8B shape, random weights, bf16",
)
CPU_SMOKE = DecodeSetup(
    "smollm2-135m",
    2,
    torch.float32,
    dict(page_size=16, budget_tokens=256, sink_tokens=32, window_tokens=32),
    "CPU smoke run of the code path (smollm2-135m shape, 2 layers, fp32): not a GPU number",
)


class _Sink:
    """Forwards to a TraceRecorder and keeps each step's per-op timings."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.timings: list[dict[str, float]] = []
        self.corrected: list[float] = []  # per step: share of (sequence, sparse layer, KV head) corrected

    def on_prefill(self, decisions: Any, prompt_tokens: int, timings_s: dict[str, float]) -> None:
        self.recorder.on_prefill(decisions, prompt_tokens, timings_s)

    def on_step(self, decisions: Any, context_tokens: int, timings_s: dict[str, float]) -> None:
        self.timings.append(timings_s)
        self.corrected.append(float(decisions.corrected[:, 1:].mean()))  # sparse layers (layer 0 is dense)
        self.recorder.on_step(decisions, context_tokens, timings_s)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fill(
    state: Any,
    shape: Any,
    batch: int,
    context: int,
    device: torch.device,
    dtype: torch.dtype,
    gen: torch.Generator,
) -> float:
    """Every layer's prefill with random K/V (b, Hkv, context, d) and one query; seconds taken."""
    t0 = time.perf_counter()
    for layer in range(shape.n_layers):
        q = torch.randn(batch, shape.n_qo_heads, 1, shape.head_dim, generator=gen, device=device, dtype=dtype)
        k = torch.randn(
            batch, shape.n_kv_heads, context, shape.head_dim, generator=gen, device=device, dtype=dtype
        )
        v = torch.randn(
            batch, shape.n_kv_heads, context, shape.head_dim, generator=gen, device=device, dtype=dtype
        )
        state.prefill(layer, q, k, v)
        del q, k, v
    state.end_prefill()
    _sync(device)
    return time.perf_counter() - t0


def _fill_by_model(
    ctx: Any, vocab_size: int, batch: int, context: int, device: torch.device, gen: torch.Generator
) -> float:
    """The model's own prefill of `context` random tokens per sequence; seconds taken."""
    from freekv_runtime.decode import prefill

    tokens = torch.randint(3, vocab_size, (batch, context), generator=gen, device=device)
    t0 = time.perf_counter()
    prefill(ctx, tokens)
    _sync(device)
    return time.perf_counter() - t0


def _config_name(method: str, tau: float | None, context: int, batch: int) -> str:
    return f"{method}{'' if tau is None else f'-tau{tau:g}'}-ctx{context}-b{batch}"


@torch.inference_mode()
def _one(
    loaded: Any,
    setup: DecodeSetup,
    method: str,
    tau: float | None,
    context: int,
    batch: int,
    steps: int,
    out: Path,
    seed: int,
) -> dict[str, Any]:
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.decode import DecodeContext

    device, dtype = loaded.device, loaded.dtype
    method_knobs: dict[str, Any] = {} if tau is None else {"tau": tau}
    if method == "duoattention":
        method_knobs["head_split"] = "probe"  # random weights have no trained head split
    knobs = RuntimeConfig(method=method, dense_layers=(0,), **setup.knobs, knobs=method_knobs)
    adapter, state, timer = _new_state(loaded, knobs, batch)
    trace_steps = min(steps, 8)
    total = context + WARMUP_STEPS + steps + trace_steps + PROFILE_STEPS + 1
    gen = torch.Generator(device=device).manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ctx = DecodeContext(adapter, state, adapter.rope_table(total), timer)
    if method in RANDOM_KV_FILL:
        fill = "random K/V, one query"
        fill_s = _fill(state, adapter.shape, batch, context, device, dtype, gen)
    else:
        fill = "model prefill of random tokens"
        fill_s = _fill_by_model(ctx, loaded.spec.vocab_size, batch, context, device, gen)
    timer.collect()
    token = torch.randint(3, loaded.spec.vocab_size, (batch, 1), generator=gen, device=device)
    step = _decode_step(ctx, token, context)
    for _ in range(WARMUP_STEPS):
        step()
    row: dict[str, Any] = {
        "config": _config_name(method, tau, context, batch),
        "method": method,
        "tau": tau,
        "context": context,
        "batch": batch,
        "fill": fill,
        **_plain_step_timings(step, state, timer, device, batch, steps, fill_s),
    }
    meta = _metadata(loaded, knobs, setup, timer, batch, context, seed)
    sink, traced = _traced_steps(step, ctx, device, out, meta, knobs.page_size, trace_steps)
    row["ms_per_token_with_op_timing"] = statistics.median(traced) * 1e3
    # random weights: how often heads are corrected says little about a real model (replay the trace)
    row["correction_rate_traced_steps"] = statistics.mean(sink.corrected) if method == "freekv" else None
    ops = sorted({k for t in sink.timings for k in t})
    row["op_ms_per_step"] = {k: 1e3 * statistics.mean(t.get(k, 0.0) for t in sink.timings) for k in ops}
    row["timing_clock"] = timer.clock
    row["trace"] = str(out / "trace")
    if device.type == "cuda":
        row["timeline"] = profile_steps(step, out)
        row["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    return row


def _new_state(loaded: Any, knobs: Any, batch: int) -> tuple[Any, Any, Any]:
    """(model adapter, empty policy state for `batch` sequences, its OpTimer) of the policy `knobs` name."""
    from freekv_runtime.model import ModelAdapter
    from freekv_runtime.policies import make_policy
    from freekv_runtime.timing import OpTimer

    adapter = ModelAdapter(loaded.model)
    timer = OpTimer(loaded.device)
    policy = make_policy(knobs)
    policy.prepare(adapter)
    state = policy.new_state(adapter.shape, batch, loaded.device, loaded.dtype, timer)
    return adapter, state, timer


def _decode_step(ctx: Any, token: torch.Tensor, position: int) -> Callable[[], None]:
    """One decode step per call, from `token` at `position` on: each step feeds the token sampled from the
    previous step's logits."""
    from freekv_runtime.decode import Sampling, decode_one_token, sample

    def step() -> None:
        nonlocal token, position
        logits = decode_one_token(ctx, token, position)
        token = sample(logits, Sampling(), None)[:, None]
        position += 1

    return step


def _timed_s(step: Callable[[], None], device: torch.device) -> float:
    """Seconds of one step, synchronised before and after."""
    _sync(device)
    t0 = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - t0


def _plain_step_timings(
    step: Callable[[], None], state: Any, timer: Any, device: torch.device, batch: int, steps: int,
    fill_s: float,
) -> dict[str, Any]:
    """`steps` timed steps with the per-op timing events off (they cost host time per layer): the row's
    latency, throughput and recall traffic per step."""
    stats = getattr(state, "recall_stats", None)
    bytes0 = stats.recalled_bytes if stats else 0
    pages0 = stats.head_pages if stats else 0
    timer.enabled = False
    times = [_timed_s(step, device) for _ in range(steps)]
    timer.enabled = True
    step_s = statistics.median(times)
    recalled = (stats.recalled_bytes - bytes0) / steps if stats else 0
    return {
        "ms_per_token": step_s * 1e3,
        "tokens_per_s": batch / step_s,
        "ms_per_token_min": min(times) * 1e3,
        "ms_per_token_max": max(times) * 1e3,
        "timed_steps": steps,
        "fill_s": fill_s,
        "recall_bytes_per_step": recalled,
        "recall_head_pages_per_step": (stats.head_pages - pages0) / steps if stats else 0,
        "recall_gbps_over_step": recalled / step_s / 1e9,
    }


def _metadata(
    loaded: Any, knobs: Any, setup: DecodeSetup, timer: Any, batch: int, context: int, seed: int
) -> Any:
    """The trace's RunMetadata of one configuration (random weights and random K/V, as labelled)."""
    from freekv_runtime.api import device_string, library_versions, runtime_dict
    from traces import RunMetadata

    runtime = runtime_dict(knobs, loaded.spec.n_layers, str(loaded.dtype).removeprefix("torch."))
    runtime["batch_size"] = batch
    return RunMetadata(
        model=loaded.spec,
        runtime=runtime,
        task={"name": "gpu_suite_decode", "context_tokens": context, "fill": "random K/V"},
        seeds={"weights": seed, "inputs": seed},
        device=device_string(loaded.device),
        library_versions=library_versions(),
        timing_clock=timer.clock,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        extra={"weights": loaded.source, "random_weights": seed, "setup": setup.label},
    )


def _traced_steps(
    step: Callable[[], None], ctx: Any, device: torch.device, out: Path, meta: Any, page_size: int,
    trace_steps: int,
) -> tuple[_Sink, list[float]]:
    """`trace_steps` timed steps recorded into OUT/trace with the per-op timings on: (the sink that kept
    their timings and corrections, each step's seconds)."""
    from freekv_runtime.recorder import TraceRecorder
    from traces import TraceWriter

    with TraceWriter.create(out / "trace", meta, overwrite=True) as writer:
        sink = _Sink(TraceRecorder(writer, page_size=page_size))
        ctx.recorder = sink
        traced = [_timed_s(step, device) for _ in range(trace_steps)]
        ctx.recorder = None
    return sink, traced


def _release() -> None:
    gc.collect()
    if has_cuda():
        torch.cuda.empty_cache()
        for name in ("_host_emptyCache", "_accelerator_emptyHostCache"):  # pinned blocks torch keeps cached
            host_empty = getattr(torch._C, name, None)
            if host_empty is not None:
                host_empty()
                break


def markdown_table(rows: list[dict[str, Any]], label: str) -> str:
    lines = [
        f"Decode, {label}",
        "",
        "| config | ms/token | tokens/s | ms/token, op timing on | recall MB/step | recall GB/s (avg) | "
        "H2D GB/s while copying | recall/compute overlap | corrected share | peak GPU GB | note |",
        "|---" * 11 + "|",
    ]

    def f(value: Any, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for r in rows:
        tl = r.get("timeline") or {}
        lines.append(
            f"| {r['config']} | {f(r.get('ms_per_token'))} | {f(r.get('tokens_per_s'), 1)} | "
            f"{f(r.get('ms_per_token_with_op_timing'))} | "
            f"{f((r.get('recall_bytes_per_step') or 0) / 1e6 if 'ms_per_token' in r else None, 1)} | "
            f"{f(r.get('recall_gbps_over_step'))} | {f(tl.get('h2d_gbps_while_copying'))} | "
            f"{f(tl.get('recall_compute_overlap'))} | {f(r.get('correction_rate_traced_steps'))} | "
            f"{f(r.get('peak_gpu_memory_gb'), 1)} | "
            f"{r.get('error', '')} |"
        )
    return "\n".join(lines) + "\n"


def run(out: Path, opts: Options) -> dict:
    from freekv_runtime.random_weights import clear_random_models, load_random_model

    cuda = has_cuda()
    setup = GPU_SETUP if cuda else CPU_SMOKE
    contexts = opts.contexts if cuda else (1024,)
    batches = opts.batches if cuda else (1, 2)
    steps = opts.steps if cuda else 2
    device = torch.device("cuda" if cuda else "cpu")
    t0 = time.perf_counter()
    loaded = load_random_model(setup.model, opts.seed, device, setup.dtype, setup.layers)
    build_s = time.perf_counter() - t0
    methods = [(m, t) for m in opts.methods for t in (opts.taus if m == "freekv" else (None,))]
    rows: list[dict[str, Any]] = []
    for context in contexts:
        for batch in batches:
            for method, tau in methods:
                name = _config_name(method, tau, context, batch)
                print(f"   decode {name}", flush=True)
                try:
                    row = _one(loaded, setup, method, tau, context, batch, steps, out / name, opts.seed)
                except torch.OutOfMemoryError as exc:
                    row = {"config": name, "error": f"out of memory: {str(exc).splitlines()[0]}"}
                except Exception as exc:  # noqa: BLE001 - recorded in the row; the next config runs
                    row = {"config": name, "error": f"{type(exc).__name__}: {exc}"}
                _release()
                rows.append(row)
                table = {"setup": setup.label, "model_build_s": build_s, "rows": rows}
                write_json(out / "table.json", table)
                (out / "table.md").write_text(markdown_table(rows, setup.label), encoding="utf-8")
    del loaded
    clear_random_models()
    _release()
    failed = [r["config"] for r in rows if "error" in r]
    result: dict[str, Any] = {
        "table": str(out / "table.json"),
        "configs": len(rows),
        "failed_configs": failed,
    }
    if not cuda:
        result.update(
            status="skipped",
            reason=f"{cuda_skip_reason()}: ran only the CPU smoke configuration "
            f"({len(rows)} rows, {len(failed)} failed) to exercise the code path",
        )
    elif failed:
        result.update(status="partial", error=f"{len(failed)} of {len(rows)} configurations failed")
    return result
