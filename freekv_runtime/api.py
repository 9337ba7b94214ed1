"""`run_trace`: run a real model with a KV policy on a task; measured accuracy, a trace and its summary.

```python
from freekv_runtime.api import TraceRequest, TaskSpec, run_trace
outcome = run_trace(TraceRequest(model="smollm2-135m", task=TaskSpec("passkey", context_tokens=2048),
                                 runtime=RuntimeConfig(method="freekv", ...), out_dir=Path("runs/x")))
outcome.accuracy  # {"passkey_accuracy": 1.0}; outcome.trace_dir == out_dir / "trace"
```
Writes `out_dir/trace/` (a `traces` trace: one sequence per task sample) and `out_dir/summary.json`
(accuracy per metric, its 95% interval, its per-prompt results + `traces.stats.trace_summary`; see
`_write_summary`). The loaded model is cached per process.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import DecodeContext, Sampling, generate, prefill, teacher_forced
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.model import ModelAdapter
from freekv_runtime.multi_context_run import continue_with_logits, document_pass, run_with_logits
from freekv_runtime.policies import make_policy
from freekv_runtime.policies._multi_context import MultiContextPolicy, Segments
from freekv_runtime.policies.base import KVPolicy
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.random_weights import load_random_model
from freekv_runtime.recorder import TraceRecorder
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.tasks.base import ForcedResult
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import LoadedModel, load_model
from traces import RunMetadata, TraceWriter, open_trace
from traces.atomic_write import atomic_write_text
from traces.catalogue import DENSE
from traces.models import get_model
from traces.probe import PROBE_KEY

__all__ = [
    "TraceRequest", "TaskSpec", "TraceOutcome", "run_trace", "PolicyRunner", "resolve_device",
    "resolve_dtype", "device_string", "library_versions", "runtime_dict", "samples_dict",
    "check_task_context",
]

GREEDY = Sampling()
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TraceRequest:
    """One traced run. weights: a local HF directory or .gguf file (None: the default source, see
    freekv_runtime.weights). device: "auto" (cuda if available, else cpu), "cpu" or "cuda".
    overwrite: replace a trace already in out_dir/trace. random_weights: a seed instead of real weights
    (see freekv_runtime.random_weights; accuracy is then withheld as meaningless)."""

    model: str = "smollm2-135m"
    weights: Path | None = None
    task: TaskSpec = field(default_factory=TaskSpec)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    out_dir: Path = Path("runs/trace")
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    overwrite: bool = False
    random_weights: int | None = None  # a seed: the registry architecture with random weights, no download
    layers: int | None = None  # random weights only: keep the first N decoder layers (small test runs)
    random_init: str = "device"  # random weights only: "device" (fast) or "cpu" (same weights on any device)
    batch_size: int = 8  # sequences run together (equal prompt lengths); 1 runs them one by one


@dataclass(frozen=True)
class TraceOutcome:
    """accuracy: metric -> point value; intervals: metric -> Estimate (95% interval, n, method, and the
    per-prompt results in Estimate.samples)."""

    accuracy: dict[str, float]
    trace_dir: Path
    summary: dict[str, Any]
    intervals: dict[str, Estimate] = field(default_factory=dict)


def resolve_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise RuntimeInputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeInputError("device 'cuda' was asked for but torch sees no CUDA device; use cpu or auto")
    return torch.device(device)


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise RuntimeInputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def batch_groups(lengths: list[tuple[int, ...]], batch_size: int) -> list[list[int]]:
    """Indices of sequences grouped into batches: equal `lengths` keys only (no padding: a ragged set
    runs as several equal-length batches), at most batch_size each, in first-seen order."""
    if batch_size < 1:
        raise RuntimeInputError(f"batch_size must be at least 1, got {batch_size}")
    by_key: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(lengths):
        by_key.setdefault(key, []).append(i)
    return [idx[j : j + batch_size] for idx in by_key.values() for j in range(0, len(idx), batch_size)]


class PolicyRunner:
    """`tasks.base.SequenceRunner` over a loaded model and a policy: each sequence is traced.

    The `*_batch` methods run their sequences `batch_size` at a time (equal lengths per batch, see
    `batch_groups`) and return results in input order; batching changes no result (greedy tokens are
    equal, logits equal to float tolerance; sampled tokens draw from one generator per sequence)."""

    def __init__(
        self, loaded: LoadedModel, policy: KVPolicy, writer: TraceWriter | None, timer: OpTimer,
        batch_size: int = 8,
    ) -> None:
        self.loaded = loaded
        self.adapter = ModelAdapter(loaded.model)
        self.policy = policy
        policy.prepare(self.adapter)  # model-dependent set-up (RazorAttention's probe, InfiniGen's weights)
        self.writer = writer
        self.timer = timer
        self.batch_size = batch_size
        self.tokenizer = loaded.tokenizer
        self.model_key = f"{loaded.spec.name}|{loaded.source}|{loaded.dtype}|{loaded.device.type}"
        self.dense_layers = policy.config.dense_layers
        self.max_positions = loaded.spec.max_position_tokens
        self.n_sequences = 0

    def _context(
        self, policy: KVPolicy, b: int, n_positions: int, recorder: TraceRecorder | None
    ) -> DecodeContext:
        state = policy.new_state(self.adapter.shape, b, self.loaded.device, self.loaded.dtype, self.timer)
        return DecodeContext(self.adapter, state, self.adapter.rope_table(n_positions), self.timer, recorder)

    def _recorder(self, b: int) -> TraceRecorder:
        recorder = TraceRecorder(self.writer, first_sequence=self.n_sequences,
                                 page_size=self.policy.config.page_size)
        self.n_sequences += b
        return recorder

    def _ids(self, rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.loaded.device)  # (b, T)

    def generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling = GREEDY,
        seeds: list[int] | None = None, with_logits: bool = False,
    ) -> list[tuple[list[int], torch.Tensor | None]]:
        """Per prompt: (N new token ids, the N - 1 decode-step logits (N - 1, V) on the CPU if
        with_logits else None). seeds: one per prompt when sampling (temperature > 0)."""
        out: list[tuple[list[int], torch.Tensor | None]] = [([], None)] * len(prompts)
        for idx in batch_groups([(len(p),) for p in prompts], self.batch_size):
            ctx = self._context(self.policy, len(idx), len(prompts[idx[0]]) + max_new_tokens,
                                self._recorder(len(idx)))
            gens = None
            if sampling.temperature > 0:
                seeds_ = seeds if seeds is not None else list(range(len(prompts)))
                gens = [torch.Generator(device=self.loaded.device).manual_seed(seeds_[i]) for i in idx]
            rows: list[torch.Tensor] | None = [] if with_logits else None
            tokens = generate(ctx, self._ids([prompts[i] for i in idx]), max_new_tokens, sampling, gens, rows)
            logits = torch.stack(rows, dim=1).cpu() if rows else None  # (b, N - 1, V)
            for j, i in enumerate(idx):
                out[i] = (tokens[j].tolist(), None if logits is None else logits[j])
        return out

    def teacher_forced_batch(self, prompts: list[list[int]], forced: list[list[int]]) -> list[ForcedResult]:
        out: list[ForcedResult] = [ForcedResult(torch.empty(0), None)] * len(prompts)
        keys = [(len(p), len(f)) for p, f in zip(prompts, forced, strict=True)]
        for idx in batch_groups(keys, self.batch_size):
            recorder = self._recorder(len(idx))
            ctx = self._context(self.policy, len(idx), sum(keys[idx[0]]), recorder)
            logits = teacher_forced(
                ctx, self._ids([prompts[i] for i in idx]), self._ids([forced[i] for i in idx])
            ).cpu()  # (b, N, V)
            steps = recorder.attention_mass
            mass = np.stack(steps, axis=1) if steps else None  # (b, N, L, H)
            for j, i in enumerate(idx):
                out[i] = ForcedResult(logits[j], None if mass is None else mass[j])
        return out

    def dense_teacher_forced_batch(
        self, prompts: list[list[int]], forced: list[list[int]]
    ) -> list[torch.Tensor]:
        dense = DensePolicy(replace(self.policy.config, method=DENSE, knobs={}, measure_attention_mass=False))
        out: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
        keys = [(len(p), len(f)) for p, f in zip(prompts, forced, strict=True)]
        for idx in batch_groups(keys, self.batch_size):
            ctx = self._context(dense, len(idx), sum(keys[idx[0]]), None)
            logits = teacher_forced(
                ctx, self._ids([prompts[i] for i in idx]), self._ids([forced[i] for i in idx])
            ).cpu()  # (b, N, V)
            for j, i in enumerate(idx):
                out[i] = logits[j]
        return out

    def dense_generate_batch(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuation with dense attention (the dense policy), untraced."""
        dense = DensePolicy(replace(self.policy.config, method=DENSE, knobs={}, measure_attention_mass=False))
        out: list[list[int]] = [[]] * len(prompts)
        for idx in batch_groups([(len(p),) for p in prompts], self.batch_size):
            ctx = self._context(dense, len(idx), len(prompts[idx[0]]) + max_new_tokens, None)
            tokens = generate(ctx, self._ids([prompts[i] for i in idx]), max_new_tokens)
            for j, i in enumerate(idx):
                out[i] = tokens[j].tolist()
        return out

    def multi_context_batch(
        self, prompts: list[list[int]], segments: list[Segments], n_tokens: int,
        forced: list[list[int]] | None = None, dense: bool = False,
    ) -> list[tuple[list[int], torch.Tensor, torch.Tensor | None]]:
        """Per prompt: (n_tokens greedy tokens, their logits (n_tokens, V) on the CPU, row 0 the prefill's;
        with `forced`, the logits teacher-forced on forced[i] (else None)). A multi-context policy first
        prefills each document alone (segments give the documents), prefills the joined prompt once and
        continues both ways from it (the greedy run is traced); any other policy, and `dense` (the dense
        policy, untraced: joint prefill), runs the joined prompt as one context."""
        policy = self.policy
        if dense:
            config = replace(self.policy.config, method=DENSE, knobs={}, measure_attention_mass=False)
            policy = DensePolicy(config)
        multi = isinstance(policy, MultiContextPolicy)
        out: list[tuple[list[int], torch.Tensor, torch.Tensor | None]] = [([], torch.empty(0), None)]
        out = out * len(prompts)
        keys = [(len(p), s.prefix_tokens, s.query_tokens, *s.document_tokens)
                for p, s in zip(prompts, segments, strict=True)]
        for idx in batch_groups(keys, self.batch_size):
            n_prompt = len(prompts[idx[0]])
            recorder = None if dense else self._recorder(len(idx))
            ctx = self._context(policy, len(idx), n_prompt + n_tokens, recorder)
            ids = self._ids([prompts[i] for i in idx])
            fixed = self._ids([forced[i][:n_tokens] for i in idx]) if forced is not None else None
            forced_logits = None
            if multi:
                with self.timer.op("document_pass"):
                    document_pass(self.adapter, ctx, ids, segments[idx[0]])
                with torch.inference_mode():
                    first = prefill(ctx, ids)
                twin = replace(ctx, state=ctx.state.fork(), recorder=None)  # type: ignore[attr-defined]
                tokens, logits = continue_with_logits(ctx, first, n_prompt, n_tokens)
                if fixed is not None:
                    forced_logits = continue_with_logits(twin, first, n_prompt, n_tokens, fixed)[1].cpu()
            else:
                tokens, logits = run_with_logits(ctx, ids, n_tokens)
                if fixed is not None:
                    again = self._context(policy, len(idx), n_prompt + n_tokens, None)
                    forced_logits = run_with_logits(again, ids, n_tokens, fixed)[1].cpu()
            logits = logits.cpu()
            for j, i in enumerate(idx):
                out[i] = (tokens[j].tolist(), logits[j], None if forced_logits is None else forced_logits[j])
        return out

    # one-sequence forms (one batch of one)
    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        return self.generate_batch([prompt_ids], max_new_tokens)[0][0]

    def teacher_forced(self, prompt_ids: list[int], forced_ids: list[int]) -> ForcedResult:
        return self.teacher_forced_batch([prompt_ids], [forced_ids])[0]

    def dense_teacher_forced(self, prompt_ids: list[int], forced_ids: list[int]) -> torch.Tensor:
        return self.dense_teacher_forced_batch([prompt_ids], [forced_ids])[0]


def library_versions() -> dict[str, str]:
    """Versions recorded in RunMetadata.library_versions."""
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "triton", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def device_string(device: torch.device) -> str:
    """RunMetadata.device: "cuda:0 (NVIDIA ...)" or "cpu (x86_64, 2 threads)"."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def runtime_dict(runtime: RuntimeConfig, n_layers: int, dtype: str, batch_size: int = 1) -> dict[str, Any]:
    """RunMetadata.runtime: the config plus dtype and batch size (the largest batch the sequences ran
    in: step timings are per batch step); dense attention lists every layer as dense."""
    out = runtime.to_dict()
    if runtime.method == DENSE:
        out["dense_layers"] = list(range(n_layers))  # every layer attends the whole context
    out.update(dtype=dtype, batch_size=batch_size)
    return out


def run_trace(req: TraceRequest) -> TraceOutcome:
    """Run `req.task` with `req.runtime` on the real model; write the trace and summary.json."""
    spec = get_model(req.model)
    device, dtype = resolve_device(req.device), resolve_dtype(req.dtype)
    task = get_task(req.task.name)
    task.check(req.task)
    check_task_context(req.runtime.method, req.task.name)
    if req.task.context_tokens > spec.max_position_tokens:
        raise RuntimeInputError(
            f"task context_tokens {req.task.context_tokens} exceeds the {spec.max_position_tokens} positions "
            f"of model {spec.name!r}"
        )
    runtime = req.runtime
    if task.needs_attention_mass and not runtime.measure_attention_mass:
        runtime = replace(runtime, measure_attention_mass=True)
    policy = make_policy(runtime)
    loaded = _load(req, device, dtype)
    spec = loaded.spec  # with --layers, the reduced architecture that actually ran
    timer = OpTimer(device)
    # the runner prepares the policy (RazorAttention's probe, InfiniGen's calibration) before the trace's
    # metadata is written, so that the metadata records what the probe found; it gets the writer below
    runner = PolicyRunner(loaded, policy, None, timer, batch_size=req.batch_size)
    task_dict = req.task.to_dict()
    task_dict["decode_tokens"] = req.task.decode_tokens or task.default_decode_tokens
    meta = RunMetadata(
        model=spec,
        runtime=runtime_dict(runtime, spec.n_layers, req.dtype, min(req.batch_size, req.task.n_samples)),
        task=task_dict,
        seeds={"task": req.seed, "sampling": req.seed,
               **({"weights": req.random_weights} if req.random_weights is not None else {})},
        device=device_string(device),
        library_versions=library_versions(),
        timing_clock=timer.clock,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        extra={**_weights_extra(req, loaded), **_probe_extra(policy),
               **({"policy_notes": notes} if (notes := policy.config_notes()) else {})},
    )
    out_dir = Path(req.out_dir)
    trace_dir = out_dir / "trace"
    started = time.perf_counter()
    with TraceWriter.create(trace_dir, meta, overwrite=req.overwrite) as writer:
        runner.writer = writer
        intervals = task.run(req.task, runner, req.seed)
    wall_s = time.perf_counter() - started
    withheld: dict[str, Estimate] = {}
    if req.random_weights is not None:  # a random model's answers mean nothing: keep the numbers aside
        withheld = dict(intervals)
        nan = math.nan
        intervals = {k: Estimate(nan, nan, nan, e.n, "withheld: random weights")
                     for k, e in intervals.items()}
    task_notes = task.generation_notes(req.task) if hasattr(task, "generation_notes") else []
    summary = _write_summary(out_dir, trace_dir, intervals, wall_s, runner.n_sequences, withheld,
                             req.random_weights, policy.config_notes(), task_notes)
    accuracy = {k: e.value for k, e in intervals.items()}
    return TraceOutcome(accuracy=accuracy, trace_dir=trace_dir, summary=summary, intervals=intervals)



RANDOM_INITS = ("device", "cpu")


def check_task_context(method: str, task_name: str) -> None:
    """RuntimeInputError when a multi-context method is asked to run a single-context task."""
    from traces.catalogue import entry

    if entry(method).kind == "multi-context" and not getattr(get_task(task_name), "multi_context", False):
        raise RuntimeInputError(
            f"method {method} joins separately prefilled documents and needs a multi-context task "
            f"(rag_facts, rag_qa); task {task_name!r} is a single context. Run {method} with --task "
            "rag_facts or rag_qa, or pick a single-context method")


def _load(req: TraceRequest, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """The real model, or with `random_weights` the registry architecture with seeded random weights."""
    if req.random_weights is None:
        if req.layers is not None:
            raise RuntimeInputError("--layers shrinks a random-weights model only: give --random-weights "
                                    "SEED too, or drop --layers (real weights always run every layer)")
        return load_model(req.model, req.weights, device, dtype)
    if req.weights is not None:
        raise RuntimeInputError("--weights and --random-weights exclude each other: give one of them")
    if req.random_init not in RANDOM_INITS:
        raise RuntimeInputError(
            f"random_init must be one of {', '.join(RANDOM_INITS)}, got {req.random_init!r}")
    init = device if req.random_init == "device" else torch.device("cpu")
    return load_random_model(req.model, req.random_weights, device, dtype, req.layers, init)


def _weights_extra(req: TraceRequest, loaded: LoadedModel) -> dict[str, Any]:
    """RunMetadata.extra: where the weights came from; random weights record their seed and layers."""
    extra: dict[str, Any] = {"weights": loaded.source}
    if req.random_weights is not None:
        extra.update(random_weights=req.random_weights, random_init=req.random_init,
                     layers=loaded.spec.n_layers, registry_layers=get_model(req.model).n_layers,
                     accuracy="meaningless: random weights")
    return extra



def _probe_extra(policy: KVPolicy) -> dict[str, Any]:
    """RunMetadata.extra entry of what the policy's `prepare` found (traces.probe): {} when nothing."""
    probe = policy.prepared_metadata()
    return {PROBE_KEY: probe} if probe else {}


def samples_dict(intervals: dict[str, Estimate]) -> dict[str, list[dict[str, Any]]]:
    """metric -> [{"id", "score", "answer"}, ...] of the metrics that carry per-prompt results."""
    return {k: [s.to_dict() for s in e.samples] for k, e in intervals.items() if e.samples}


def _write_summary(
    out_dir: Path, trace_dir: Path, intervals: dict[str, Estimate], wall_s: float, n_sequences: int,
    withheld: dict[str, Estimate], random_weights: int | None, policy_notes: list[str] | None = None,
    task_notes: list[str] | None = None,
) -> dict:
    """summary.json: `accuracy` {metric: value}, `accuracy_ci` {metric: Estimate.to_dict() without its
    samples}, `accuracy_samples` {metric: [{"id", "score", "answer"}, ...]} (the per-prompt results,
    stored once, here), wall time, throughput and the trace summary. With random weights every value
    and sample is withheld (accuracy null, accuracy_samples empty); the raw ones are kept under
    accuracy_random_weights and accuracy_samples_random_weights for debugging only."""
    from traces.stats import trace_summary

    reader = open_trace(trace_dir)
    accuracy = {k: (None if math.isnan(e.value) else e.value) for k, e in intervals.items()}  # no NaN in JSON
    summary = {
        "accuracy": accuracy, "accuracy_ci": {k: e.to_dict(with_samples=False) for k, e in intervals.items()},
        "accuracy_samples": samples_dict(intervals),
        "wall_s": wall_s, "samples_per_s": n_sequences / wall_s if wall_s > 0 else None,
        "trace_dir": str(trace_dir), **trace_summary(reader),
    }
    if policy_notes:
        summary["policy_notes"] = list(policy_notes)
    if task_notes:
        summary["task_notes"] = list(task_notes)
    if random_weights is not None:
        summary["random_weights"] = random_weights
        summary["accuracy_note"] = (
            f"meaningless: random weights (seed {random_weights}); accuracy is withheld (null), the raw "
            "values are in accuracy_random_weights and accuracy_samples_random_weights for debugging only")
        summary["accuracy_random_weights"] = {
            k: (None if math.isnan(e.value) else e.value) for k, e in withheld.items()
        }
        summary["accuracy_samples_random_weights"] = samples_dict(withheld)
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
    return summary


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")
