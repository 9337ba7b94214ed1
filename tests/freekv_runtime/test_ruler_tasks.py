"""RULER-style tasks: exact prompt lengths, answers present in the prompt, seeds, RULER's scoring,
parameter errors; long-generation fidelity of dense attention against itself."""

from __future__ import annotations

import re

import pytest
import torch

from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.tasks.base import sample_id
from freekv_runtime.tasks.longgen import first_divergence
from freekv_runtime.tasks.ruler_common import score_samples, string_match_all, string_match_part
from freekv_runtime.tasks.words import zeta
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

SYNTHETIC = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")


@pytest.fixture(scope="module")
def loaded():
    return load_model("smollm2-135m")


def _samples(task_name: str, spec: TaskSpec, tokenizer, seed: int) -> list[tuple[list[int], list[str]]]:
    out = get_task(task_name).samples(spec, tokenizer, seed)
    return [(s.token_ids, s.answers) if hasattr(s, "token_ids") else s for s in out]


@pytest.mark.parametrize("name", SYNTHETIC)
def test_prompts_have_exact_length_and_hold_their_answers(loaded, name) -> None:
    task = get_task(name)
    spec = TaskSpec(name, context_tokens=700, n_samples=3)
    samples = _samples(name, spec, loaded.tokenizer, seed=5)
    for ids, answers in samples:
        assert len(ids) == 700 - task.default_decode_tokens
        text = loaded.tokenizer.decode(ids)
        assert answers and all(a in text for a in answers)
    assert _samples(name, spec, loaded.tokenizer, seed=5) == samples
    assert _samples(name, spec, loaded.tokenizer, seed=6) != samples
    assert task.metrics == (f"{name}_score",)


def test_niah_variants_follow_ruler(loaded) -> None:
    spec = TaskSpec("niah_multikey", context_tokens=600, n_samples=1)
    ids, answers = _samples("niah_multikey", spec, loaded.tokenizer, 0)[0]
    text = loaded.tokenizer.decode(ids)
    assert len(answers) == 1 and text.count("One of the special magic numbers for") == 4
    assert text.startswith("A special magic number is hidden") and text.endswith(
        "mentioned in the provided text is"
    )
    spec = TaskSpec("niah_multiquery", context_tokens=600, n_samples=1)
    ids, answers = _samples("niah_multiquery", spec, loaded.tokenizer, 0)[0]
    text = loaded.tokenizer.decode(ids)
    assert len(answers) == 4 and ", and " in text and text.endswith("mentioned in the provided text are")
    spec = TaskSpec(
        "niah_single", context_tokens=600, n_samples=1, params={"value_type": "uuids", "haystack": "noise"}
    )
    ids, answers = _samples("niah_single", spec, loaded.tokenizer, 0)[0]
    assert re.fullmatch(r"[0-9a-f-]{36}", answers[0]) and "The grass is green." in loaded.tokenizer.decode(
        ids
    )


def test_vt_chain_and_cwe_fwe_counts(loaded) -> None:
    spec = TaskSpec("vt", context_tokens=600, n_samples=1, params={"num_hops": 3})
    ids, answers = _samples("vt", spec, loaded.tokenizer, 0)[0]
    text = loaded.tokenizer.decode(ids)
    assert len(answers) == 4 and f"VAR {answers[1]} = VAR {answers[0]}" in text and "4 variables are" in text
    spec = TaskSpec("cwe", context_tokens=900, n_samples=1, params={"freq_cw": 5, "freq_ucw": 1, "num_cw": 3})
    ids, answers = _samples("cwe", spec, loaded.tokenizer, 0)[0]
    body = (
        loaded.tokenizer.decode(ids)
        .split("Memorize the ones that appear most often.\n")[1]
        .split("\nQuestion")[0]
    )
    words = re.findall(r"\d+\. (\w+)", body)
    assert (
        all(words.count(w) == 5 for w in answers)
        and max(words.count(w) for w in set(words) - set(answers)) == 1
    )
    spec = TaskSpec("fwe", context_tokens=900, n_samples=1)
    ids, answers = _samples("fwe", spec, loaded.tokenizer, 0)[0]
    coded = loaded.tokenizer.decode(ids).split("coded words. ")[1].split("\nQuestion")[0].split()
    counts = sorted(((coded.count(w), w) for w in set(coded) if w != "...."), reverse=True)
    assert [w for _, w in counts[:3]] == answers and coded.count("....") > counts[0][0]
    assert zeta(2.0) == pytest.approx(1.6449340668, rel=1e-8)


def test_ruler_scoring() -> None:
    assert string_match_all("The numbers are 123 and 456.", ["123", "456", "789"]) == pytest.approx(2 / 3)
    assert string_match_part("answer: PARIS", ["paris", "london"]) == 1.0
    e = score_samples(["a b", "b", "c"], [["a", "x"], ["b"], ["x"]], "all", seed=0)
    assert e.value == pytest.approx(0.5) and e.method == "bootstrap"
    assert score_samples(["a", "b"], [["a"], ["x"]], "all", 0).method == "wilson"
    e = score_samples(["a b", "b"], [["a", "x"], ["b"]], "all", 0, ids=["t/0", "t/1"])
    assert [(s.id, s.score, s.answer) for s in e.samples] == [("t/0", 0.5, "a b"), ("t/1", 1.0, "b")]


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("niah_single", {"num_keys": 0}, "num_keys must be an integer"),
        ("niah_single", {"value_type": "emoji"}, "value_type must be one of"),
        ("niah_multikey", {"depth": 3}, "unknown niah_multikey params"),
        ("vt", {"haystack": "lorem"}, "haystack must be one of"),
        ("cwe", {"num_cw": "ten"}, "num_cw must be an integer"),
        ("fwe", {"alpha": 0.5}, "alpha must be a number"),
        ("longgen", {"x": 1}, "takes one param, kl"),
    ],
)
def test_bad_params_are_named(name, params, message) -> None:
    with pytest.raises(RuntimeInputError, match=message):
        get_task(name).check(TaskSpec(name, context_tokens=1024, params=params))


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1


def test_longgen_of_dense_attention_against_itself(loaded, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path))
    runner = PolicyRunner(
        loaded, DensePolicy(RuntimeConfig(method="dense")), None, OpTimer(torch.device("cpu"))
    )
    spec = TaskSpec("longgen", context_tokens=150, n_samples=2, decode_tokens=6)
    scores = get_task("longgen").run(spec, runner, seed=0)
    assert scores["longgen_agreement"].value == 1.0
    assert scores["longgen_divergence_step"].value == 6.0
    assert scores["longgen_kl"].value < 1e-6 and scores["longgen_kl"].n == 2
    for e in scores.values():  # every metric: one result per prompt, the same ids, the generation as answer
        assert [s.id for s in e.samples] == [sample_id(spec, 0, i) for i in range(2)]
    assert [s.score for s in scores["longgen_divergence_step"].samples] == [6.0, 6.0]
    assert scores["longgen_agreement"].samples[0].answer
    assert len(list((tmp_path / "dense_generations").glob("*.json"))) == 2
