"""Tasks: passkey prompts (exact length, needle placement, seeds), fidelity windows and metrics, and the
passkey answered by the real default model with full KV."""

from __future__ import annotations

import math

import pytest
import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.tasks import TASKS, TaskSpec, get_task
from freekv_runtime.tasks.base import record_ids, sample_id
from freekv_runtime.tasks.fidelity import kl_divergence_nats, top1_agreement
from freekv_runtime.tasks.passkey import NEEDLE, PasskeyTask
from freekv_runtime.tasks.text import reference_prose, split_sentences
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model


@pytest.fixture(scope="module")
def loaded():
    return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def full_runner(loaded):
    from freekv_runtime.api import PolicyRunner

    dense = DensePolicy(RuntimeConfig(method="dense"))
    return PolicyRunner(loaded, dense, None, OpTimer(torch.device("cpu")))


def test_registry_names_and_unknown_task() -> None:
    synthetic = {"passkey", "fidelity", "longgen", "niah_single", "niah_multikey", "niah_multikey_2",
                 "niah_multikey_3", "niah_multivalue",
                 "niah_multiquery", "vt", "cwe", "fwe", "rag_facts"}
    loaders = {"longbench_v2", "ruler_jsonl", "longgenbench", "math500", "aime24", "gpqa", "rag_qa"}
    assert set(TASKS) == synthetic | loaders
    with pytest.raises(RuntimeInputError, match="unknown task 'qa'.*fidelity.*passkey"):
        get_task("qa")


@pytest.mark.parametrize("filler", ["repeat", "natural"])
@pytest.mark.parametrize("template", ["plain", "chat"])
def test_passkey_prompts_have_exact_length_and_needle_at_depth(loaded, filler, template) -> None:
    params = {"filler": filler, "template": template}
    spec = TaskSpec("passkey", context_tokens=777, n_samples=3, params=params)
    prompts = PasskeyTask().prompts(spec, loaded.tokenizer, seed=3)
    needle_len = len(loaded.tokenizer(" " + NEEDLE.format(key=12345), add_special_tokens=False)["input_ids"])
    for prompt, depth in zip(prompts, (0.05, 0.5, 0.95), strict=True):
        assert len(prompt.token_ids) == 777 - PasskeyTask.default_decode_tokens
        assert prompt.depth == pytest.approx(depth)
        text = loaded.tokenizer.decode(prompt.token_ids)
        assert NEEDLE.format(key=prompt.key) in text
        assert text.rstrip().endswith("The pass key is")
        # the needle starts within a sentence (<= ~30 tokens) of its depth in the filler
        n_filler = len(prompt.token_ids) - needle_len
        assert abs(prompt.needle_token - depth * n_filler) < 60
    assert ("<|im_start|>" in loaded.tokenizer.decode(prompts[0].token_ids)) == (template == "chat")


def test_passkey_keys_are_seeded(loaded) -> None:
    spec = TaskSpec("passkey", context_tokens=300, n_samples=4)
    task = PasskeyTask()
    keys = [[p.key for p in task.prompts(spec, loaded.tokenizer, seed)] for seed in (0, 0, 1)]
    assert keys[0] == keys[1] != keys[2]
    assert all(10_000 <= k < 100_000 for k in keys[0])


@pytest.mark.parametrize(
    ("params", "context", "message"),
    [
        ({"filler": "lorem"}, 512, "filler must be one of repeat, natural"),
        ({"template": "xml"}, 512, "template must be one of plain, chat"),
        ({"needle": "x"}, 512, "unknown passkey params"),
        ({}, 70, "must exceed decode_tokens"),
    ],
)
def test_passkey_rejects_bad_parameters(params, context, message) -> None:
    with pytest.raises(RuntimeInputError, match=message):
        PasskeyTask().check(TaskSpec("passkey", context_tokens=context, params=params))


def test_task_spec_validation() -> None:
    with pytest.raises(RuntimeInputError, match="n_samples"):
        TaskSpec(n_samples=0)
    with pytest.raises(RuntimeInputError, match="context_tokens"):
        TaskSpec(context_tokens=10)


def test_sample_ids_name_the_prompt_not_the_configuration() -> None:
    plain = TaskSpec("passkey", context_tokens=2048, n_samples=4)
    assert sample_id(plain, 0, 3) == "passkey/2048/seed0/3"
    shaped = TaskSpec("passkey", context_tokens=2048, n_samples=9, params={"filler": "natural"})
    assert sample_id(shaped, 1, 3) == sample_id(TaskSpec(**{**shaped.to_dict(), "n_samples": 2}), 1, 3)
    shaped_id = sample_id(shaped, 1, 3)
    assert shaped_id.startswith("passkey/2048/") and shaped_id.endswith("/seed1/3")
    assert len({sample_id(plain, 0, 3), sample_id(shaped, 0, 3),
                sample_id(TaskSpec("passkey", context_tokens=2048, decode_tokens=8), 0, 3)}) == 3
    assert record_ids([{"_id": "x"}, {"_id": "y"}]) == ["x", "y"]
    assert record_ids([{"q": 1}, {"q": 2}]) == ["0", "1"]
    assert record_ids([{"index": 0}, {"index": 0}, {"q": 1}]) == ["0#0", "0#1", "#2"]


def test_reference_prose_is_plain_sentences() -> None:
    prose = reference_prose()
    assert len(prose) > 100_000
    sentences = split_sentences(prose)
    assert len(sentences) > 1000
    assert not any(line.startswith(" ") for line in prose.splitlines())


def test_kl_and_top1_helpers() -> None:
    ref = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 5.0]])
    assert kl_divergence_nats(ref, ref).abs().max() < 1e-12
    other = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
    p, q = torch.softmax(ref[0].double(), 0), torch.softmax(other[0].double(), 0)
    expected = float((p * (p / q).log()).sum())
    assert float(kl_divergence_nats(ref, other)[0]) == pytest.approx(expected)
    assert top1_agreement(ref, other).tolist() == [False, True]


def test_fidelity_of_dense_attention_is_perfect(full_runner, tmp_path, monkeypatch) -> None:
    """Full policy vs the (cached) dense reference: identical distributions, all attention mass."""
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path))
    spec = TaskSpec("fidelity", context_tokens=160, n_samples=2, decode_tokens=6)
    task = get_task("fidelity")
    windows = task.windows(spec, full_runner)
    assert [(len(p), len(f)) for p, f in windows] == [(154, 6), (154, 6)]
    assert windows[0][0] != windows[1][0]
    metrics = task.run(spec, full_runner, seed=0)
    assert metrics["top1_agreement"].value == 1.0 and metrics["top1_agreement"].n == 2
    assert metrics["mean_kl"].value < 1e-9 and metrics["mean_kl"].method == "bootstrap"
    assert math.isnan(metrics["attention_mass"].value)  # this runner's full policy does not measure it
    assert metrics["attention_mass"].samples == ()  # ... so it has no per-window results either
    samples = metrics["mean_kl"].samples
    assert [s.id for s in samples] == [sample_id(spec, 0, i) for i in range(2)]
    assert [s.id for s in metrics["top1_agreement"].samples] == [s.id for s in samples]
    assert all(s.score < 1e-9 and s.answer for s in samples)  # the decoded argmax tokens
    assert len(list((tmp_path / "dense_logits").glob("*.pt"))) == 2


def test_passkey_full_kv_2k_answers(full_runner) -> None:
    """smollm2-135m with full KV at 2K context finds the key at 5% and 95% depth."""
    spec = TaskSpec("passkey", context_tokens=2048, n_samples=2)
    result = PasskeyTask().run(spec, full_runner, seed=0)["passkey_accuracy"]
    assert (result.value, result.method, result.n) == (1.0, "wilson", 2)
    assert [(s.id, s.score) for s in result.samples] == [(f"passkey/2048/seed0/{i}", 1.0) for i in (0, 1)]
    assert all(s.answer for s in result.samples)


@pytest.mark.slow
@pytest.mark.parametrize("context_tokens", [2048, 4096])
def test_passkey_full_kv_10_depths(full_runner, context_tokens) -> None:
    """The measured baseline: 10/10 needle depths at 2K and at 4K with full KV."""
    spec = TaskSpec("passkey", context_tokens=context_tokens, n_samples=10)
    assert PasskeyTask().run(spec, full_runner, seed=0)["passkey_accuracy"].value == 1.0


def test_passkey_scores_truncated_answers_as_wrong(full_runner) -> None:
    """One decoded token cannot hold a 5-digit key (digits are single tokens): the score must be 0."""
    spec = TaskSpec("passkey", context_tokens=300, n_samples=2, decode_tokens=1)
    assert PasskeyTask().run(spec, full_runner, seed=0)["passkey_accuracy"].value == 0.0
