"""User model files and per-run overrides of a model's positions and rope scaling, importable without torch.

A user model file is YAML, one model per file, found as `<name>.yaml` in any directory listed in the
environment variable `FREEKV_DSE_MODELS` (several separated by `os.pathsep`, the first wins; a user file
shadows a shipped entry of the same name) or given by path (`--model-file PATH`):

    name: my-model-8b                 # required; equals the file's stem when found through FREEKV_DSE_MODELS
    source: "config.json of org/my-model-8b on the Hugging Face hub"   # required: where the numbers come from
    layers: 32                        # num_hidden_layers
    hidden: 4096                      # hidden_size
    heads: 32                         # num_attention_heads (query heads)
    kv_heads: 8                       # num_key_value_heads
    head_dim: 128                     # optional: hidden / heads
    intermediate: 14336               # intermediate_size (SwiGLU FFN width)
    vocab: 128256                     # vocab_size
    positions: 131072                 # max_position_embeddings the model serves (after rope scaling)
    rope_theta: 500000                # optional [10000]
    rope_scaling: yarn:4              # optional: none, yarn:F, linear:F, or a mapping as in config.json
    bytes_per_param: 2                # optional: weight bytes per parameter [the simulation's dtype_bytes]
    architecture: llama               # optional: llama, qwen2 (runtime loaders), glm or opt (simulator only)
    hf_id: org/my-model-8b            # optional: weights the runtime looks for
    tied_embeddings: false            # optional
    qkv_bias: false                   # optional

Every mistake is a `ModelFileError` naming the file and the key. `with_positions` derives a spec whose
positions or rope scaling are overridden (`--max-positions N`, `--rope-scaling yarn:4`); the spec's
source says so.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from traces.model_spec import ModelSpec

__all__ = [
    "MODELS_ENV",
    "ModelFileError",
    "ARCHITECTURES",
    "ROPE_TYPES",
    "spec_from_file_data",
    "load_model_file",
    "model_dirs",
    "find_model_file",
    "user_model_names",
    "parse_rope_scaling",
    "with_positions",
]

MODELS_ENV = "FREEKV_DSE_MODELS"
ARCHITECTURES = ("llama", "qwen2", "glm", "opt")
ROPE_TYPES = ("yarn", "linear", "dynamic", "llama3", "longrope")
_FLAG_ROPE_TYPES = ("yarn", "linear")  # the forms `type:factor` takes; others need a mapping in a model file

# file key -> (ModelSpec field, required)
_INT_KEYS = {"layers": ("n_layers", True), "hidden": ("hidden_size", True), "heads": ("n_qo_heads", True),
             "kv_heads": ("n_kv_heads", True), "head_dim": ("head_dim", False),
             "intermediate": ("ffn_size", True), "vocab": ("vocab_size", True),
             "positions": ("max_position_tokens", True), "bytes_per_param": ("bytes_per_param", False)}
_TEXT_KEYS = ("name", "source", "architecture", "hf_id")
_BOOL_KEYS = ("tied_embeddings", "qkv_bias")
_KEYS = (*_TEXT_KEYS, *_INT_KEYS, *_BOOL_KEYS, "rope_theta", "rope_scaling")


class ModelFileError(ValueError):
    """A user model file, or a positions / rope scaling override, that cannot be used; says which key."""


def _int(data: dict, key: str, where: str) -> int | None:
    v = data.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ModelFileError(f"{where}: {key} must be a positive integer, got {v!r}")
    return v


def _text(data: dict, key: str, where: str) -> str | None:
    v = data.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ModelFileError(f"{where}: {key} must be a non-empty text, got {v!r}")
    return v.strip()


def _scaling_mapping(value: dict, where: str) -> dict[str, float | str]:
    """A config.json-style rope scaling mapping, checked: rope_type (or type) and a positive factor."""
    out: dict[str, float | str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ModelFileError(f"{where}: rope_scaling.{k} must be a number or text, got {v!r}")
        out["rope_type" if k == "type" else k] = float(v) if isinstance(v, (int, float)) else v
    if out.get("rope_type") not in ROPE_TYPES:
        raise ModelFileError(f"{where}: rope_scaling.rope_type must be one of {', '.join(ROPE_TYPES)}, "
                             f"got {out.get('rope_type')!r}")
    factor = out.get("factor")
    if not isinstance(factor, float) or not factor > 0:
        raise ModelFileError(f"{where}: rope_scaling.factor must be a positive number, got {factor!r}")
    return out


def parse_rope_scaling(text: str, original_positions: int, where: str) -> dict[str, float | str]:
    """'none' -> {}; 'yarn:4' / 'linear:8' -> a config.json rope scaling of that type and factor over
    `original_positions` (the positions the model was trained with)."""
    text = text.strip().lower()
    if text == "none":
        return {}
    kind, _, factor_text = text.partition(":")
    try:
        factor = float(factor_text)
    except ValueError:
        factor = float("nan")
    if kind not in _FLAG_ROPE_TYPES or not factor > 0:
        raise ModelFileError(
            f"{where} must be 'none' or TYPE:FACTOR with TYPE one of {', '.join(_FLAG_ROPE_TYPES)} and a "
            f"positive FACTOR (e.g. yarn:4), got {text!r}; other types need a mapping in a model file"
        )
    return {"rope_type": kind, "factor": factor, "original_max_position_embeddings": original_positions}


def spec_from_file_data(data: Any, where: str) -> ModelSpec:
    """The spec a model file's parsed YAML describes (module docstring); ModelFileError naming the key."""
    if not isinstance(data, dict):
        raise ModelFileError(f"{where}: a model file is a mapping of {', '.join(_KEYS)}, got "
                             f"{type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ModelFileError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(_KEYS)}")
    for key, (_, required) in _INT_KEYS.items():
        if required and key not in data:
            raise ModelFileError(f"{where}: {key} is required (a positive integer)")
    for key in ("name", "source"):
        if _text(data, key, where) is None:
            raise ModelFileError(f"{where}: {key} is required (a non-empty text)")
    ints = {field: _int(data, key, where) for key, (field, _) in _INT_KEYS.items()}
    if ints["head_dim"] is None:
        if ints["hidden_size"] % ints["n_qo_heads"]:
            raise ModelFileError(f"{where}: head_dim is required when hidden {ints['hidden_size']} is not a "
                                 f"multiple of heads {ints['n_qo_heads']}")
        ints["head_dim"] = ints["hidden_size"] // ints["n_qo_heads"]
    if ints["n_qo_heads"] % ints["n_kv_heads"]:
        raise ModelFileError(f"{where}: heads {ints['n_qo_heads']} must be a multiple of kv_heads "
                             f"{ints['n_kv_heads']}")
    name = _text(data, "name", where)
    architecture = _text(data, "architecture", where) or "llama"
    if architecture not in ARCHITECTURES:
        raise ModelFileError(f"{where}: architecture must be one of {', '.join(ARCHITECTURES)}, got "
                             f"{architecture!r}")
    flags = {}
    for key in _BOOL_KEYS:
        v = data.get(key, False)
        if not isinstance(v, bool):
            raise ModelFileError(f"{where}: {key} must be true or false, got {v!r}")
        flags[key] = v
    theta = data.get("rope_theta", 10000.0)
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
        raise ModelFileError(f"{where}: rope_theta must be a positive number, got {theta!r}")
    scaling = data.get("rope_scaling")
    if scaling is None:
        rope_scaling: dict[str, float | str] = {}
    elif isinstance(scaling, str):
        rope_scaling = parse_rope_scaling(scaling, ints["max_position_tokens"], f"{where}: rope_scaling")
        if rope_scaling:  # `positions` is the scaled reach; the original is positions / factor
            original = round(ints["max_position_tokens"] / float(rope_scaling["factor"]))
            rope_scaling["original_max_position_embeddings"] = original
    elif isinstance(scaling, dict):
        rope_scaling = _scaling_mapping(scaling, where)
    else:
        raise ModelFileError(f"{where}: rope_scaling must be none, TYPE:FACTOR or a mapping, got {scaling!r}")
    return ModelSpec(
        name=name, hf_id=_text(data, "hf_id", where) or f"user-model:{name}", architecture=architecture,
        rope_theta=float(theta), source=f"{_text(data, 'source', where)} (from {where})",
        rope_scaling=rope_scaling, **ints, **flags,
    )


def load_model_file(path: str | os.PathLike[str]) -> ModelSpec:
    """Read and validate one model file (module docstring)."""
    p = Path(path).expanduser()
    where = f"model file {p}"
    if p.suffix.lower() == ".gguf" or p.is_dir():
        raise ModelFileError(
            f"{where} is a {'GGUF file' if p.is_file() or p.suffix.lower() == '.gguf' else 'directory'}, not "
            f"a YAML model file: give a model's own files with --model {p} (its shape is read from its "
            "metadata: docs/models.md)"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelFileError(
            f"{where} cannot be read: {why}; give a YAML model file (docs/models.md)"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelFileError(f"{where} is not valid YAML: {' '.join(str(exc).split())}") from None
    return spec_from_file_data(data, where)


def model_dirs() -> list[Path]:
    """Directories of user model files, in priority order ($FREEKV_DSE_MODELS)."""
    return [Path(p).expanduser() for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p.strip()]


def find_model_file(name: str) -> Path | None:
    """`<name>.yaml` (or .yml) in the first $FREEKV_DSE_MODELS directory that has it, else None."""
    for directory in model_dirs():
        for suffix in (".yaml", ".yml"):
            path = directory / f"{name}{suffix}"
            if path.is_file():
                return path
    return None


def user_model_names() -> list[str]:
    """Names of every model file in the $FREEKV_DSE_MODELS directories."""
    return sorted({p.stem for d in model_dirs() if d.is_dir() for p in [*d.glob("*.yaml"), *d.glob("*.yml")]})


def with_positions(spec: ModelSpec, max_positions: int | None = None, rope_scaling: str | None = None,
                   how: str = "--max-positions / --rope-scaling") -> ModelSpec:
    """`spec` with its positions and/or rope scaling overridden. `rope_scaling` as `parse_rope_scaling`
    (over the spec's original positions); positions not given become original x factor (or the original
    positions with 'none'). The source says what was overridden and by `how`."""
    if max_positions is None and rope_scaling is None:
        return spec
    if max_positions is not None and (isinstance(max_positions, bool) or max_positions < 1):
        raise ModelFileError(f"--max-positions must be a positive integer, got {max_positions!r}")
    scaling = dict(spec.rope_scaling)
    positions = spec.max_position_tokens
    if rope_scaling is not None:
        scaling = parse_rope_scaling(rope_scaling, spec.original_positions, "--rope-scaling")
        positions = round(spec.original_positions * float(scaling.get("factor", 1.0)))
    if max_positions is not None:
        positions = max_positions
    scaled = (f"{scaling['rope_type']} x{float(scaling['factor']):g} over "
              f"{int(scaling.get('original_max_position_embeddings', spec.original_positions))}"
              if scaling else "none")
    changed = f"positions {positions}, rope scaling {scaled} set by {how}"
    return replace(spec, max_position_tokens=positions, rope_scaling=scaling,
                   source=f"{spec.source}; {changed}")
