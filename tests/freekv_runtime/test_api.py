"""run_trace end to end on the real default model (tiny runs), its errors, FreeKV = full at full budget."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from freekv_runtime.api import PolicyRunner, TraceRequest, run_trace
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies import make_policy
from freekv_runtime.tasks import TaskSpec
from freekv_runtime.tasks.base import sample_id
from freekv_runtime.tasks.text import reference_prose
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model
from traces import open_trace

FULL = RuntimeConfig(method="dense", page_size=16, budget_tokens=160, sink_tokens=16, window_tokens=16)


def test_passkey_trace_with_full_attention(tmp_path) -> None:
    task = TaskSpec("passkey", context_tokens=200, n_samples=2, decode_tokens=4)
    outcome = run_trace(TraceRequest(task=task, runtime=FULL, out_dir=tmp_path, device="cpu"))
    assert set(outcome.accuracy) == {"passkey_accuracy"}
    assert outcome.trace_dir == tmp_path / "trace"
    reader = open_trace(outcome.trace_dir)
    assert reader.complete
    assert reader.n_prefills == 2 and reader.n_steps == 2 * 3  # prefill + 3 decode steps per sample
    steps = list(reader.steps())  # the two samples ran as one batch: their steps interleave
    assert [(s.sequence, s.step, s.context_tokens) for s in steps if s.sequence == 0] == [
        (0, 0, 197), (0, 1, 198), (0, 2, 199)
    ]
    assert reader.meta.runtime["batch_size"] == 2
    assert (steps[0].attended_tokens == 197).all()
    assert "step_total" in steps[0].timings_s and "attention" in steps[0].timings_s
    meta = reader.meta
    assert meta.runtime["method"] == "dense" and meta.runtime["dense_layers"] == list(range(30))
    assert meta.runtime["dtype"] == "float32" and meta.timing_clock == "wall"
    assert meta.device.startswith("cpu") and "torch" in meta.library_versions
    assert meta.task["decode_tokens"] == 4 and meta.seeds == {"task": 0, "sampling": 0}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["accuracy"] == outcome.accuracy
    assert (summary["steps"], summary["layers"], summary["kv_heads"], summary["n_sequences"]) == (6, 30, 3, 2)
    assert summary["correction_rate"] is None  # full attention makes no checks
    with pytest.raises(Exception, match="already holds a trace"):
        run_trace(TraceRequest(task=task, runtime=FULL, out_dir=tmp_path, device="cpu"))


def test_fidelity_trace_of_full_attention(tmp_path) -> None:
    task = TaskSpec("fidelity", context_tokens=120, n_samples=1, decode_tokens=4)
    outcome = run_trace(TraceRequest(task=task, runtime=FULL, out_dir=tmp_path / "run", device="cpu"))
    assert outcome.accuracy["top1_agreement"] == 1.0
    assert outcome.accuracy["mean_kl"] < 1e-9
    assert outcome.accuracy["attention_mass"] == 1.0  # measured: fidelity turns the measurement on
    step = next(open_trace(outcome.trace_dir).steps())
    assert step.attention_mass is not None and (step.attention_mass == 1.0).all()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"model": "gpt-5"}, ValueError, "unknown model 'gpt-5'"),
        ({"task": TaskSpec("qa")}, RuntimeInputError, "unknown task 'qa'"),
        ({"device": "tpu"}, RuntimeInputError, "device must be one of auto, cpu, cuda"),
        ({"dtype": "float8"}, RuntimeInputError, "dtype must be one of float32, bfloat16"),
        ({"task": TaskSpec("passkey", context_tokens=9000)}, RuntimeInputError, "exceeds the 8192 positions"),
        ({"task": TaskSpec("passkey", params={"filler": "x"})}, RuntimeInputError, "filler must be one of"),
    ],
)
def test_bad_requests_fail_before_running(tmp_path, change, error, message) -> None:
    req = TraceRequest(runtime=FULL, out_dir=tmp_path / "run", device="cpu")
    with pytest.raises(error, match=message):
        run_trace(TraceRequest(**{**req.__dict__, **change}))
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(
    importlib.util.find_spec("freekv_runtime.policies.freekv") is None, reason="FreeKV policy not present"
)
def test_freekv_with_full_budget_matches_full_attention_on_the_real_model() -> None:
    """Budget >= context: FreeKV attends every token of every head, so its logits equal dense attention's."""
    loaded = load_model("smollm2-135m")
    ids = loaded.tokenizer(reference_prose()[:8000], add_special_tokens=False)["input_ids"]
    prompt, forced = ids[:150], ids[150:162]
    shared = dict(page_size=16, budget_tokens=256, sink_tokens=16, window_tokens=16)
    logits = {}
    for method in ("dense", "freekv"):
        policy = make_policy(RuntimeConfig(method=method, knobs={"tau": 0.9} if method == "freekv" else {},
                                           **shared))
        runner = PolicyRunner(loaded, policy, None, OpTimer(torch.device("cpu")))
        logits[method] = runner.teacher_forced(prompt, forced).logits  # (12, V)
    torch.testing.assert_close(logits["freekv"], logits["dense"], atol=1e-4, rtol=1e-4)
    assert (logits["freekv"].argmax(-1) == logits["dense"].argmax(-1)).all()


def test_summary_keeps_per_prompt_results_with_the_same_ids_under_every_policy(tmp_path) -> None:
    """summary.json's accuracy_samples: one {id, score, answer} per prompt, their mean the metric's value,
    ids equal under dense attention and a sparse policy (what `dse compare` pairs by)."""
    task = TaskSpec("passkey", context_tokens=160, n_samples=3, decode_tokens=3)
    sparse = RuntimeConfig(method="streamingllm", page_size=16, budget_tokens=48, sink_tokens=16,
                           window_tokens=16)
    runs = {}
    for name, runtime in (("dense", FULL), ("sparse", sparse)):
        outcome = run_trace(TraceRequest(task=task, runtime=runtime, out_dir=tmp_path / name, device="cpu"))
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        samples = summary["accuracy_samples"]["passkey_accuracy"]
        assert len(samples) == 3 and set(samples[0]) == {"id", "score", "answer"}
        assert sum(s["score"] for s in samples) / 3 == pytest.approx(summary["accuracy"]["passkey_accuracy"])
        assert "samples" not in summary["accuracy_ci"]["passkey_accuracy"]  # stored once, in accuracy_samples
        assert [s.to_dict() for s in outcome.intervals["passkey_accuracy"].samples] == samples
        runs[name] = samples
    assert [s["id"] for s in runs["dense"]] == [s["id"] for s in runs["sparse"]] == [
        sample_id(task, 0, i) for i in range(3)
    ]
