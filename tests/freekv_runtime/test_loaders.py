"""Benchmark loaders on small files built here in each benchmark's schema: finding the data (path, HF
hub cache), missing data, scorers, and one real-model run per loader at a tiny size."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.tasks.longbench_v2 import extract_choice
from freekv_runtime.tasks.longgenbench import checks_of, split_blocks
from freekv_runtime.tasks.reasoning import gpqa_letter, last_boxed, math_equal
from freekv_runtime.tasks.ruler_jsonl import ruler_metric
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

LOADERS = ("longbench_v2", "ruler_jsonl", "longgenbench", "math500", "aime24", "gpqa")


@pytest.fixture(autouse=True)
def empty_hf_caches(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "hf" / var.lower()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def runner():
    loaded = load_model("smollm2-135m")
    dense = DensePolicy(RuntimeConfig(method="dense"))
    return PolicyRunner(loaded, dense, None, OpTimer(torch.device("cpu")))


def _jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _longbench(tmp_path):
    rec = {
        "_id": "x",
        "domain": "Single-Document QA",
        "sub_domain": "x",
        "difficulty": "easy",
        "length": "short",
        "question": "What colour is the sky?",
        "choice_A": "green",
        "choice_B": "blue",
        "choice_C": "red",
        "choice_D": "black",
        "answer": "B",
        "context": "The sky is blue. " * 200,
    }
    path = tmp_path / "lb" / "data.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([rec, {**rec, "_id": "y", "difficulty": "hard", "answer": "C"}]))
    return path


def _ruler(tmp_path):
    """One validation record of RULER's niah_single_2 task."""
    return _jsonl(
        tmp_path / "ruler" / "niah_single_2" / "validation.jsonl",
        [
            {
                "index": 0,
                "input": "A special magic number for cat is: 1234567. What is it?",
                "outputs": ["1234567"],
                "length": 20,
                "answer_prefix": " The special magic number for cat is",
            },
        ],
    )


def _longgenbench(tmp_path):
    lgb = tmp_path / "lgb" / "Dataset_short.json"
    lgb.parent.mkdir(parents=True)
    lgb.write_text(
        json.dumps(
            [
                {
                    "prompt": "Write a diary for 3 weeks. Use '#*#' to separate each weekly entry.",
                    "type": "Week",
                    "number": "3",
                    "prefix": "#*# Week 1 (January 1st - January 7th):",
                    "checks_once": "{'2': 'birthday'}",
                    "checks_range": "{}",
                    "checks_periodic": "{'1': 'workshop'}",
                }
            ]
        )
    )
    return lgb


def _math500(tmp_path):
    return _jsonl(
        tmp_path / "math" / "test.jsonl",
        [
            {
                "problem": "What is 1 + 1?",
                "solution": "2",
                "answer": "2",
                "subject": "x",
                "level": 1,
                "unique_id": "a",
            },
        ],
    )


def _gpqa(tmp_path):
    gpqa = tmp_path / "gpqa" / "gpqa_diamond.csv"
    gpqa.parent.mkdir(parents=True)
    with gpqa.open("w", newline="") as f:
        w = csv.DictWriter(
            f,
            ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"],
        )
        w.writeheader()
        w.writerow(
            {
                "Question": "Which is a noble gas?",
                "Correct Answer": "Neon",
                "Incorrect Answer 1": "Iron",
                "Incorrect Answer 2": "Carbon",
                "Incorrect Answer 3": "Sodium",
            }
        )
    return gpqa


def _files(tmp_path) -> dict[str, dict]:
    """Per loader: task params pointing at a small file in that benchmark's schema."""
    ruler = _ruler(tmp_path)
    lgb = _longgenbench(tmp_path)
    math = _math500(tmp_path)
    aime = _jsonl(
        tmp_path / "aime" / "aime.jsonl", [{"ID": "2024-I-1", "Problem": "What is 2 + 3?", "Answer": 5}]
    )
    gpqa = _gpqa(tmp_path)
    return {
        "longbench_v2": {"data": str(_longbench(tmp_path))},
        "ruler_jsonl": {"data": str(ruler.parent)},
        "longgenbench": {"data": str(lgb), "judge": "keyword"},
        "math500": {"data": str(math), "k": 2},
        "aime24": {"data": str(aime), "k": 2},
        "gpqa": {"data": str(gpqa), "k": 2},
    }


@pytest.mark.parametrize("name", LOADERS)
def test_missing_data_says_where_it_looked(name, tmp_path) -> None:
    with pytest.raises(RuntimeInputError) as err:
        get_task(name).check(TaskSpec(name, context_tokens=512, params={"data": str(tmp_path / "nope.json")}))
    assert "nope.json (does not exist)" in str(err.value) and "--param data=PATH" in str(err.value)
    if name != "ruler_jsonl":
        with pytest.raises(RuntimeInputError, match="hf_hub_cache.*network is never used"):
            get_task(name).check(TaskSpec(name, context_tokens=512))


def test_hub_cache_layout_is_found(tmp_path) -> None:
    snap = tmp_path / "hf" / "hf_hub_cache" / "datasets--HuggingFaceH4--MATH-500" / "snapshots" / "abc123"
    _jsonl(snap / "test.jsonl", [{"problem": "1+1?", "answer": "2"}])
    problems = get_task("math500").problems(TaskSpec("math500", context_tokens=512, n_samples=5), seed=0)
    assert problems == [
        ("1+1?\nPlease reason step by step, and put your final answer within \\boxed{}.", "2")
    ]


def test_bad_records_and_filters(tmp_path) -> None:
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "q"}])
    with pytest.raises(RuntimeInputError, match="lack 'input' or 'outputs'"):
        get_task("ruler_jsonl").check(TaskSpec("ruler_jsonl", context_tokens=512, params={"data": str(bad)}))
    with pytest.raises(RuntimeInputError, match="none of the fields"):
        get_task("math500").check(TaskSpec("math500", context_tokens=512, params={"data": str(bad)}))
    lb = get_task("longbench_v2")
    spec = TaskSpec(
        "longbench_v2", context_tokens=512, params={"data": str(_longbench(tmp_path)), "difficulty": "hard"}
    )
    assert [r["_id"] for r in lb.records(spec)] == ["y"]


def test_scorers() -> None:
    assert extract_choice("**The correct answer is (C)**") == "C"
    assert extract_choice("The correct answer is D.") == "D" and extract_choice("maybe B") is None
    assert ruler_metric("qa_1") == "part" and ruler_metric("niah_single_2") == "all"
    assert last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{\dfrac{3}{4}}") == r"\dfrac{3}{4}"
    assert math_equal(r"\dfrac{3}{4}", r"\frac{3}{4}") and math_equal("5.0", "5") and not math_equal("6", "5")
    assert math_equal(r"\text{(B)}", "(B)") and not math_equal(None, "1")
    assert gpqa_letter("reasoning...\nAnswer: C") == "C" and gpqa_letter(r"\boxed{B}") == "B"
    blocks = split_blocks("#*# Week 1: a birthday #*# Week 2: workshop #*# Week 2: again", "Week")
    assert sorted(blocks) == [1, 2] and "again" not in blocks[2]
    assert checks_of({"checks_once": "{'2': 'birthday'}", "checks_range": {"3": "trip"}}) == [
        (2, "birthday"),
        (3, "trip"),
    ]


@pytest.mark.parametrize("name", LOADERS)
def test_loader_runs_on_the_real_model(runner, name, tmp_path) -> None:
    params = _files(tmp_path)[name]
    spec = TaskSpec(name, context_tokens=400, n_samples=2, decode_tokens=6, params=params)
    task = get_task(name)
    task.check(spec)
    scores = task.run(spec, runner, seed=0)
    assert set(scores) == set(task.metrics)
    for metric, e in scores.items():
        assert 0.0 <= e.value <= 1.0, metric
        assert e.n >= 1
        ids = [s.id for s in e.samples]  # one per record (per problem for the k-sample tasks)
        assert len(ids) == e.n and len(set(ids)) == e.n and all(i.startswith(f"{name}/400/") for i in ids)
        assert sum(s.score for s in e.samples) / e.n == pytest.approx(e.value), metric
    own = {"longbench_v2": "x", "ruler_jsonl": "0", "math500": "a", "aime24": "2024-I-1", "gpqa": "0"}
    if name in own:  # the record's own id where it has one
        assert next(iter(scores.values())).samples[0].id.endswith(f"/seed0/{own[name]}")
