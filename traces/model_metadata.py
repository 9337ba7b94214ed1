"""A model given by path instead of a registry name: its shape read from its own files, importable without
torch.

`--model PATH` (and `model: {name: PATH}` in a study) names a local model: a `.gguf` file, the first part
of a split GGUF (`NAME-00001-of-0000N.gguf`), a Hugging Face directory with `config.json`, or a Hugging
Face id (`org/name`) that is no local path but has a snapshot in the local Hugging Face cache
(`HF_HUB_CACHE`, `HF_HOME/hub` or ~/.cache/huggingface/hub). A name is a path when it ends in `.gguf` or
holds a path separator (`./qwen`, `~/models/x`, `/abs/dir`, `Qwen/Qwen2.5-0.5B-Instruct`); registry names
hold neither. The spec's name is the path as given, so every process of a sweep resolves it the
same way, and traces carry the full spec.

What is read: traces.gguf_metadata for a GGUF; for a directory, config.json (read as JSON, the keys
transformers' LlamaConfig / Qwen2Config save: `model_type`, `num_hidden_layers`, `hidden_size`,
`num_attention_heads`, `num_key_value_heads`, `head_dim`, `intermediate_size`, `vocab_size`,
`max_position_embeddings`, `rope_parameters` or `rope_theta` + `rope_scaling`, `tie_word_embeddings`,
`attention_bias`, `dtype` / `torch_dtype`). A scaled model serves max(max_position_embeddings,
original x factor) positions (Qwen2.5's cards add YaRN x4 over 32768 while config.json keeps 32768;
Llama 3.1's llama3 scaling keeps its own 131072).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from traces.gguf_metadata import GGUF_ARCHITECTURES, ModelMetadataError, spec_from_gguf
from traces.model_files import ROPE_TYPES
from traces.model_spec import ModelSpec

__all__ = ["ModelMetadataError", "SUPPORTED_ARCHITECTURES", "is_model_path", "model_path", "spec_from_path",
           "spec_from_hf_dir", "hf_hub_cache", "hf_cache_snapshot"]

SUPPORTED_ARCHITECTURES = GGUF_ARCHITECTURES  # config.json model_type and GGUF general.architecture alike
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def is_model_path(name: str) -> bool:
    """Whether a model name is a path (module docstring) rather than a registry or model-file name."""
    return name.lower().endswith(".gguf") or "/" in name or os.sep in name or name.startswith("~")


def hf_hub_cache() -> Path:
    """The local Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def hf_cache_snapshot(hf_id: str) -> tuple[Path | None, str]:
    """The snapshot of `hf_id` in the local hub cache that refs/main pins (else the newest) with config.json
    and safetensors, and a sentence saying where it looked."""
    hub = hf_hub_cache()
    repo = hub / f"models--{hf_id.replace('/', '--')}"
    looked = f"the Hugging Face cache {hub} has no snapshot of {repo.name} with config.json and safetensors"
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = repo / "snapshots" / ref.read_text().strip()
        if _is_hf_dir(pinned):
            return pinned, looked
    snapshots = [p for p in (repo / "snapshots").glob("*") if _is_hf_dir(p)]
    if not snapshots:
        return None, looked
    return max(snapshots, key=lambda p: p.stat().st_mtime), looked


def _could_be_hf_id(name: str) -> bool:
    org, sep, rest = name.partition("/")
    return bool(sep and org and rest) and "/" not in rest and not name.startswith((".", "~")) \
        and not name.lower().endswith(".gguf")


def model_path(name: str) -> Path:
    """The file or directory a path name points at (~ expanded, relative to the working directory); for a
    Hugging Face id that is no local path, its snapshot in the local hub cache when there is one."""
    path = Path(name).expanduser()
    if not path.exists() and _could_be_hf_id(name):
        snapshot, _ = hf_cache_snapshot(name)
        if snapshot is not None:
            return snapshot
    return path


def _unsupported(where: str, found: Any, key: str) -> ModelMetadataError:
    return ModelMetadataError(
        f"{where}: {key} {found!r} is not supported; the runtime runs {', '.join(SUPPORTED_ARCHITECTURES)} "
        "models (Llama, Qwen2 / Qwen2.5, SmolLM, ...). For the simulator alone, describe the model in a "
        "model file (docs/models.md)"
    )


def _positive(config: dict, key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ModelMetadataError(f"{where}: {key} is missing; a config.json of this architecture has it")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelMetadataError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _rope(config: dict, where: str) -> tuple[float, dict[str, float | str]]:
    """(theta, scaling) from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`."""
    params = config.get("rope_parameters") or {}
    scaling_in = config.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling_in, dict):
        raise ModelMetadataError(f"{where}: rope_parameters / rope_scaling must be a mapping")
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
        raise ModelMetadataError(f"{where}: rope_theta must be a positive number, got {theta!r}")
    merged = {**scaling_in, **{k: v for k, v in params.items() if k != "rope_theta"}}
    kind = merged.pop("rope_type", merged.pop("type", "default"))
    if kind == "default":
        return float(theta), {}
    if kind not in ROPE_TYPES:
        raise ModelMetadataError(f"{where}: rope type {kind!r} is not supported ({', '.join(ROPE_TYPES)} or "
                                 "default)")
    factor = merged.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 0:
        raise ModelMetadataError(f"{where}: rope scaling {kind} needs a positive factor, got {factor!r}")
    scaling: dict[str, float | str] = {"rope_type": str(kind)}
    for key, value in merged.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            scaling[key] = int(value) if key == "original_max_position_embeddings" else float(value)
        elif isinstance(value, str):
            scaling[key] = value
    return float(theta), scaling


def spec_from_hf_dir(path: Path, name: str) -> ModelSpec:
    """The ModelSpec named `name` that the config.json in directory `path` describes (module docstring)."""
    config_path = path / "config.json"
    where = f"{config_path}"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelMetadataError(
            f"model directory {path} has no config.json: give a Hugging Face model directory (config.json + "
            "*.safetensors) or a .gguf file"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelMetadataError(f"{where} cannot be read as JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelMetadataError(f"{where} is not a JSON object")
    arch = config.get("model_type")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise _unsupported(where, arch, "model_type")
    if config.get("use_sliding_window"):
        raise ModelMetadataError(f"{where}: use_sliding_window is true; the runtime and the simulator model "
                                 "full attention in every layer (set it false to run the model so)")
    hidden = _positive(config, "hidden_size", where)
    heads = _positive(config, "num_attention_heads", where)
    kv_heads = _positive(config, "num_key_value_heads", where, default=heads)
    if heads % kv_heads:
        raise ModelMetadataError(f"{where}: num_attention_heads {heads} is not a multiple of "
                                 f"num_key_value_heads {kv_heads}")
    theta, scaling = _rope(config, where)
    positions = _positive(config, "max_position_embeddings", where)
    original = scaling.get("original_max_position_embeddings")
    if original and scaling["rope_type"] != "llama3":
        positions = max(positions, round(float(original) * float(scaling["factor"])))
    dtype = config.get("dtype") or config.get("torch_dtype")
    return ModelSpec(
        name=name, hf_id=f"local:{path.resolve()}", architecture=arch,
        n_layers=_positive(config, "num_hidden_layers", where), hidden_size=hidden, n_qo_heads=heads,
        n_kv_heads=kv_heads, head_dim=_positive(config, "head_dim", where, default=hidden // heads),
        ffn_size=_positive(config, "intermediate_size", where),
        vocab_size=_positive(config, "vocab_size", where),
        rope_theta=theta, max_position_tokens=positions,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
        source=f"config.json of {path.resolve()}", rope_scaling=scaling,
        bytes_per_param=_BYTES.get(str(dtype)) if dtype else None,
    )


@functools.lru_cache(maxsize=32)
def _spec_cached(name: str, resolved: str, mtime_ns: int) -> ModelSpec:
    """Read once per file version (a capacity search looks its model up hundreds of times)."""
    del mtime_ns  # part of the cache key: a replaced file is read again
    path = Path(resolved)
    return spec_from_gguf(path, name) if path.is_file() else spec_from_hf_dir(path, name)


def spec_from_path(name: str) -> ModelSpec:
    """The spec of the model at path `name` (module docstring); ModelMetadataError for a missing path, a
    file that is not a GGUF, an unsupported architecture or a missing part of a split GGUF."""
    path = model_path(name)
    if not path.exists():
        cache = (f", nor a Hugging Face id with a snapshot in the local cache ({hf_cache_snapshot(name)[1]})"
                 if _could_be_hf_id(name) else "")
        raise ModelMetadataError(
            f"model {name!r} is a path, and {path} does not exist{cache}: give a .gguf file (the first part "
            "NAME-00001-of-0000N.gguf of a split one), a Hugging Face directory with config.json, or a "
            "registry name (the registry and model files: docs/models.md)"
        )
    if path.is_file() and path.suffix.lower() != ".gguf":
        raise ModelMetadataError(
            f"model {name!r}: {path} is a file but not a .gguf file; give a .gguf file or a Hugging Face "
            "directory with config.json"
        )
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f" (it holds {', '.join(ggufs[:4])}: give one of them)" if ggufs else ""
        raise ModelMetadataError(f"model {name!r}: directory {path} has no config.json{hint}; give a Hugging "
                                 "Face model directory or a .gguf file")
    stamp = path / "config.json" if path.is_dir() else path
    return _spec_cached(name, str(path.resolve()), stamp.stat().st_mtime_ns)
