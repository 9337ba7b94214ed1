"""User model files, positions / rope scaling overrides and the long-context registry entries."""

from __future__ import annotations

import pytest

from traces.model_files import ModelFileError, load_model_file, spec_from_file_data, with_positions
from traces.models import MODELS, ModelSpec, get_model, use_model

_FILE = {
    "name": "my-8b", "source": "config.json of org/my-8b", "layers": 32, "hidden": 4096, "heads": 32,
    "kv_heads": 8, "intermediate": 14336, "vocab": 128256, "positions": 131072,
}


def test_qwen25_carries_its_cards_yarn_to_131072_positions() -> None:
    for name in ("qwen-2.5-7b", "qwen-2.5-14b"):
        spec = get_model(name)
        assert spec.max_position_tokens == 131072 and spec.original_positions == 32768
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
        assert spec.rope_scaling == yarn
        assert "131,072" in spec.source
    llama = get_model("llama-3.1-8b")
    assert llama.rope_scaling["rope_type"] == "llama3" and llama.original_positions == 8192


def test_a_model_file_becomes_a_spec_with_defaults() -> None:
    spec = spec_from_file_data({**_FILE, "rope_scaling": "yarn:4", "bytes_per_param": 1}, "f.yaml")
    shape = (spec.n_layers, spec.n_qo_heads, spec.n_kv_heads, spec.head_dim, spec.ffn_size)
    assert shape == (32, 32, 8, 128, 14336)
    assert spec.architecture == "llama" and spec.rope_theta == 10000.0 and spec.bytes_per_param == 1
    assert spec.rope_scaling["original_max_position_embeddings"] == 32768  # 131072 / 4
    assert "f.yaml" in spec.source
    assert ModelSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(("change", "key"), [
    ({"layers": None}, "layers"),
    ({"layers": 0}, "layers"),
    ({"colour": "red"}, "colour"),
    ({"source": ""}, "source"),
    ({"rope_scaling": "ntk:2"}, "rope_scaling"),
    ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling.factor"),
    ({"kv_heads": 5}, "kv_heads"),
    ({"architecture": "mamba"}, "architecture"),
    ({"qkv_bias": "yes"}, "qkv_bias"),
])
def test_a_bad_model_file_names_the_key(change: dict, key: str) -> None:
    data = {k: v for k, v in {**_FILE, **change}.items() if v is not None}
    with pytest.raises(ModelFileError, match=key.replace(".", r"\.")):
        spec_from_file_data(data, "f.yaml")


def test_model_files_are_found_in_freekv_dse_models(tmp_path, monkeypatch) -> None:
    text = "\n".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in _FILE.items())
    (tmp_path / "my-8b.yaml").write_text(text)
    (tmp_path / "renamed.yaml").write_text(text)
    (tmp_path / "wrong.yaml").write_text("name: wrong\n")
    (tmp_path / "broken.yaml").write_text("name: [\n")
    monkeypatch.setenv("FREEKV_DSE_MODELS", str(tmp_path))
    assert get_model("my-8b").n_kv_heads == 8
    with pytest.raises(ModelFileError, match="layers is required"):
        get_model("wrong")
    with pytest.raises(ModelFileError, match="differs from the file's name"):
        get_model("renamed")
    with pytest.raises(ModelFileError, match="not valid YAML"):
        get_model("broken")
    with pytest.raises(ModelFileError, match="cannot be read"):
        load_model_file(tmp_path / "absent.yaml")


def test_overrides_and_use_model() -> None:
    qwen = get_model("qwen-2.5-7b")
    plain = with_positions(qwen, rope_scaling="none")
    assert plain.max_position_tokens == 32768 and plain.rope_scaling == {}
    assert with_positions(qwen, rope_scaling="yarn:2").max_position_tokens == 65536
    assert with_positions(qwen, max_positions=100000).max_position_tokens == 100000
    assert "set by" in plain.source
    undo = use_model(plain)
    try:
        assert get_model("qwen-2.5-7b").max_position_tokens == 32768
    finally:
        undo()
    assert get_model("qwen-2.5-7b") is MODELS["qwen-2.5-7b"]
    with pytest.raises(ModelFileError, match="--rope-scaling"):
        with_positions(qwen, rope_scaling="yarn")
