"""Batched evaluation on the real default model: results identical to running the samples one by one."""

from __future__ import annotations

import pytest
import torch

from freekv_runtime.api import PolicyRunner, batch_groups
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import Sampling
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies import make_policy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

# small pages and budget so that FreeKV selects, corrects and recalls within a 200-token context
SPARSE = RuntimeConfig(method="freekv", page_size=16, budget_tokens=64, sink_tokens=16, window_tokens=16,
                       knobs={"tau": 0.9})


@pytest.fixture(scope="module")
def loaded():
    return load_model("smollm2-135m")


def _runner(loaded, config: RuntimeConfig, batch_size: int) -> PolicyRunner:
    return PolicyRunner(
        loaded, make_policy(config), None, OpTimer(torch.device("cpu")), batch_size=batch_size
    )


def test_batch_groups_split_ragged_sets_by_length() -> None:
    assert batch_groups([(5,), (7,), (5,), (5,), (7,)], 2) == [[0, 2], [3], [1, 4]]
    assert batch_groups([(3, 1), (3, 2), (3, 1)], 8) == [[0, 2], [1]]
    with pytest.raises(RuntimeInputError, match="batch_size"):
        batch_groups([(1,)], 0)


@pytest.mark.parametrize("config", [RuntimeConfig(method="dense"), SPARSE], ids=["dense", "freekv"])
def test_batched_generation_equals_one_by_one(loaded, config) -> None:
    spec = TaskSpec("niah_multikey", context_tokens=220, n_samples=3, decode_tokens=6)
    samples = get_task("niah_multikey").samples(spec, loaded.tokenizer, seed=1)
    prompts = [s.token_ids for s in samples] + [samples[0].token_ids[:150]]  # one of another length
    one = _runner(loaded, config, 1).generate_batch(prompts, 6, with_logits=True)
    many = _runner(loaded, config, 3).generate_batch(prompts, 6, with_logits=True)
    for (tokens_1, logits_1), (tokens_b, logits_b) in zip(one, many, strict=True):
        assert tokens_1 == tokens_b
        torch.testing.assert_close(logits_b, logits_1, atol=2e-4, rtol=1e-4)


def test_batched_sampling_and_teacher_forcing_equal_one_by_one(loaded) -> None:
    prompts = [list(range(300 + i, 460 + i)) for i in range(3)]
    sampling = Sampling(temperature=1.0, top_p=0.9)
    one = _runner(loaded, SPARSE, 1).generate_batch(prompts, 5, sampling, seeds=[7, 8, 9])
    many = _runner(loaded, SPARSE, 3).generate_batch(prompts, 5, sampling, seeds=[7, 8, 9])
    assert [t for t, _ in one] == [t for t, _ in many]
    forced = [list(range(1000 + i, 1008 + i)) for i in range(3)]
    single = _runner(loaded, SPARSE, 1).teacher_forced_batch(prompts, forced)
    batched = _runner(loaded, SPARSE, 3).teacher_forced_batch(prompts, forced)
    for a, b in zip(single, batched, strict=True):
        torch.testing.assert_close(b.logits, a.logits, atol=2e-4, rtol=1e-4)


def test_task_scores_equal_batched_and_one_by_one(loaded) -> None:
    spec = TaskSpec("vt", context_tokens=260, n_samples=3, decode_tokens=12)
    task = get_task("vt")
    scores = [task.run(spec, _runner(loaded, SPARSE, b), seed=0)["vt_score"] for b in (1, 3)]
    assert scores[0] == scores[1]
