"""The multi-context tasks: rag_facts built deterministically per (spec, seed), rag_qa's loader over the
common layouts and its errors, and the fidelity scores."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import _tokenizer

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.tasks.rag_common import fidelity_scores
from freekv_runtime.tasks.rag_qa import parse_record


def _facts(seed: int, **params: object) -> list:
    spec = TaskSpec("rag_facts", context_tokens=1400, n_samples=3, params=dict(params))
    task = get_task("rag_facts")
    task.check(spec)
    return task.samples(spec, _tokenizer(), seed)


def test_rag_facts_is_deterministic_in_task_and_seed() -> None:
    a, b, c = _facts(0), _facts(0), _facts(1)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]


def test_rag_facts_spreads_one_fact_per_document_and_asks_one() -> None:
    tok = _tokenizer()
    for sample in _facts(0, documents=3):
        seg = sample.segments
        assert len(seg.document_tokens) == 3 and len(set(seg.document_tokens)) == 1  # equal lengths
        assert seg.total_tokens == len(sample.token_ids) <= 1400 - 16
        texts = [tok.decode(d) for d in sample.documents]
        assert all(t.count("special magic numbers for") == 1 for t in texts)
        assert sum(sample.answers[0] in t for t in texts) == 1  # the answer is in exactly one document
        assert "special magic number for" in tok.decode(sample.query)


def test_rag_facts_bad_params_name_the_param() -> None:
    with pytest.raises(RuntimeInputError, match="documents must be an integer"):
        _facts(0, documents=0)
    with pytest.raises(RuntimeInputError, match="unknown rag_facts params"):
        _facts(0, needles=2)


LAYOUTS = [
    {"question": "q?", "answers": ["a"], "contexts": ["one", "two"]},
    {"question": "q?", "answer": "a",
     "ctxs": [{"title": "t1", "text": "one"}, {"title": "t2", "text": "two"}]},
    {"question": "q?", "answer": "a", "context": [["t1", ["on", "e"]], ["t2", ["two"]]]},
    {"question": "q?", "answer": "a", "context": {"title": ["t1", "t2"], "sentences": [["one"], ["two"]]}},
    {"question": "q?", "answer": "a", "answer_aliases": ["b"],
     "paragraphs": [{"title": "t1", "paragraph_text": "one"}, {"title": "t2", "paragraph_text": "two"}]},
]


@pytest.mark.parametrize("record", LAYOUTS)
def test_rag_qa_reads_the_common_layouts(record: dict) -> None:
    question, answers, passages = parse_record(record, "r")
    assert question == "q?" and "a" in answers
    assert [p[1] for p in passages] == ["one", "two"]


def test_rag_qa_errors_name_the_file_and_what_is_missing(tmp_path) -> None:
    task = get_task("rag_qa")
    with pytest.raises(RuntimeInputError, match="needs params.data"):
        task.check(TaskSpec("rag_qa", 1024, 2))
    with pytest.raises(RuntimeInputError, match="no such file"):
        task.check(TaskSpec("rag_qa", 1024, 2, params={"data": str(tmp_path / "none.jsonl")}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n")
    with pytest.raises(RuntimeInputError, match="no passages"):
        task.check(TaskSpec("rag_qa", 1024, 2, params={"data": str(bad)}))
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in LAYOUTS))
    spec = TaskSpec("rag_qa", 512, 5, params={"data": str(good), "documents": 2})
    task.check(spec)
    samples = task.samples(spec, _tokenizer(), 0)
    assert len(samples) == 5 and all(len(s.documents) == 2 for s in samples)


def test_fidelity_scores() -> None:
    ref = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    assert fidelity_scores(ref, ref) == (1.0, 0.0)
    top1, kl = fidelity_scores(ref, torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 2.0]]))
    assert top1 == 0.5 and kl > 0


class _SameLogitsRunner:
    """A runner whose method reproduces the joint prefill's logits exactly (what full recompute does)."""

    model_key = "same-logits"

    def __init__(self) -> None:
        self.tokenizer = _tokenizer()

    def multi_context_batch(self, prompts, segments, n_tokens, dense=False, forced=None):  # noqa: ANN001, ANN201
        logits = torch.tensor([[3.0, 1.0, 0.0]] * (n_tokens - 1))
        return [([1] * n_tokens, logits, logits) for _ in prompts]


def test_fidelity_intervals_are_bootstraps_even_when_every_prompt_agrees() -> None:
    """Top-1 agreement and KL are per-prompt shares and means: identical logits on every prompt give the
    degenerate bootstrap [1, 1] and [0, 0], never a Wilson interval of a proportion of 0/1 outcomes."""
    from freekv_runtime.tasks.rag_common import run_rag

    spec = TaskSpec("rag_facts", context_tokens=1400, n_samples=3)
    samples = _facts(0)
    out = run_rag("rag_facts", spec, _SameLogitsRunner(), 0, samples, 4, "all")
    top1, kl = out["rag_facts_top1"], out["rag_facts_kl"]
    assert (top1.value, top1.low, top1.high) == (1.0, 1.0, 1.0) and top1.method == "bootstrap"
    assert kl.value == pytest.approx(0.0, abs=1e-9) and kl.high == pytest.approx(0.0, abs=1e-9)
    assert kl.method == "bootstrap"
