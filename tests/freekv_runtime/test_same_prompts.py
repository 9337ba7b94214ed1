"""Every configuration of the same task and seed sees the same prompts, so runs pair by prompt id: two
`run_trace` runs with different KV methods, knobs and batch sizes on the real model record the same
prompt ids and prompt lengths, and their summaries keep every prompt's score and answer."""

from __future__ import annotations

import json
from pathlib import Path

from freekv_runtime.api import TraceRequest, run_trace
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.weights import load_model
from traces import open_trace

SPEC = TaskSpec("niah_single", context_tokens=200, n_samples=3, decode_tokens=4)


def test_task_prompts_depend_on_the_spec_and_seed_only() -> None:
    tokenizer = load_model("smollm2-135m").tokenizer
    task = get_task(SPEC.name)
    first = [s.token_ids for s in task.samples(SPEC, tokenizer, 0)]
    again = [s.token_ids for s in task.samples(SPEC, tokenizer, 0)]
    other_seed = [s.token_ids for s in task.samples(SPEC, tokenizer, 1)]
    assert first == again and first != other_seed


def test_two_configurations_pair_on_every_prompt(tmp_path: Path) -> None:
    """Dense attention three prompts at a time against a sparse method with its own knobs one at a time."""
    method, knobs, batch = "freekv", {"tau": 0.5}, 1
    runs = {}
    for name, runtime, batch_size in (
        ("dense", RuntimeConfig(method="dense"), 3),
        (method, RuntimeConfig(method=method, budget_tokens=64, page_size=16, sink_tokens=16,
                               window_tokens=16, knobs=knobs), batch),
    ):
        run_trace(TraceRequest(task=SPEC, runtime=runtime, out_dir=tmp_path / name, device="cpu",
                               batch_size=batch_size))
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        prompts = [p.prompt_tokens for p in open_trace(tmp_path / name / "trace").prefills()]
        runs[name] = (summary["accuracy_samples"]["niah_single_score"], prompts)
    (dense, dense_prompts), (other, other_prompts) = runs["dense"], runs[method]
    assert [s["id"] for s in dense] == [s["id"] for s in other]
    assert len({s["id"] for s in dense}) == 3 and all(s["id"].startswith("niah_single/200/") for s in dense)
    assert sorted(dense_prompts) == sorted(other_prompts) and len(dense_prompts) == 3
    for s in (*dense, *other):  # every prompt keeps its score and the model's answer
        assert s["score"] in (0.0, 1.0) and isinstance(s["answer"], str) and s["answer"]
