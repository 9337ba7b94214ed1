"""A model's shape from the metadata of a GGUF file (one file, or split in parts), importable without torch.

`gguf_parts(path)` finds every part of a split GGUF (llama.cpp's `NAME-00001-of-0000N.gguf` naming, the
`split.count` key of the first part) and `spec_from_gguf(path, name)` reads the shape with gguf's
`GGUFReader` (gguf-py in ggerganov/llama.cpp, gguf-py/gguf/constants.py for the key names):

- architecture: `general.architecture` (llama, qwen2; others are refused);
- layers, hidden, heads, KV heads, FFN width, positions: `{arch}.block_count`, `.embedding_length`,
  `.attention.head_count`, `.attention.head_count_kv`, `.feed_forward_length`, `.context_length`;
- head dim: `{arch}.attention.key_length`, else hidden / heads; checked against `blk.0.attn_k.weight`;
- vocabulary: the rows of `token_embd.weight`; tied embeddings: no `output.weight` tensor; q/k/v bias:
  a `blk.0.attn_q.bias` tensor;
- RoPE: `{arch}.rope.freq_base`, `{arch}.rope.scaling.type|factor|original_context_length` (linear,
  yarn; the older `{arch}.rope.scale_linear`), and Llama 3's scaling, which llama.cpp's converter stores
  as per-frequency factors in a `rope_freqs.weight` tensor (convert_hf_to_gguf.py, LlamaModel
  generate_extra_tensors) and which is recognised by recomputing those factors;
- bytes per parameter: 4 when every weight matrix is F32, 2 when F16/BF16, else unset (a quantised file:
  the runtime dequantises it, the simulator prices weights at its dtype_bytes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.model_files import ModelFileError
from traces.model_spec import ModelSpec

__all__ = ["GGUF_ARCHITECTURES", "ModelMetadataError", "gguf_parts", "spec_from_gguf", "split_name_match"]

GGUF_ARCHITECTURES = ("llama", "qwen2")  # the runtime's adapter (freekv_runtime/model.py) runs these

_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


class ModelMetadataError(ModelFileError):
    """A model path whose files cannot give a shape: missing, unreadable, an unsupported architecture, a
    missing part of a split GGUF, inconsistent metadata. Says which file and key."""


def split_name_match(path: Path) -> re.Match[str] | None:
    """The match of llama.cpp's split naming `PREFIX-0000I-of-0000N.gguf`, or None."""
    return _SPLIT_NAME.match(path.name)


def _reader(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(path)
    except (OSError, ValueError, IndexError) as exc:
        raise ModelMetadataError(
            f"GGUF file {path} cannot be read: {' '.join(str(exc).split()) or type(exc).__name__}; give a "
            "complete GGUF file (an interrupted download leaves a truncated one)"
        ) from None


def _value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def gguf_parts(path: Path) -> list[Path]:
    """[path] for a single GGUF, every part in order for the first part of a split one. A later part, a
    missing part or parts that disagree on the count is a ModelMetadataError."""
    match = split_name_match(path)
    if match is None:
        return [path]
    number, count = int(match["no"]), int(match["count"])
    first = path.with_name(f"{match['prefix']}-00001-of-{match['count']}.gguf")
    if number != 1:
        raise ModelMetadataError(
            f"GGUF file {path} is part {number} of {count} of a split model: give its first part "
            f"{first.name} (the metadata lives there; the other parts are found beside it)"
        )
    parts = [path.with_name(f"{match['prefix']}-{i:05d}-of-{match['count']}.gguf")
             for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise ModelMetadataError(
            f"split GGUF {path}: part(s) {', '.join(missing)} of {count} missing in {path.parent}; download "
            f"every part {match['prefix']}-0000I-of-{match['count']}.gguf into the same directory"
        )
    return parts


@dataclass(frozen=True)
class _Tensors:
    """Name -> (shape in ggml order, ne0 first; type name) over every part."""

    info: dict[str, tuple[tuple[int, ...], str]]

    def shape(self, name: str) -> tuple[int, ...] | None:
        found = self.info.get(name)
        return None if found is None else found[0]


def _tensors(readers: list[Any]) -> _Tensors:
    info: dict[str, tuple[tuple[int, ...], str]] = {}
    for reader in readers:
        for t in reader.tensors:
            info[t.name] = (tuple(int(x) for x in t.shape), t.tensor_type.name)
    return _Tensors(info)


def _check_split(path: Path, parts: list[Path], readers: list[Any], tensors: _Tensors) -> None:
    """Each part says it is part i of len(parts), and the tensors add up to `split.tensors.count`."""
    if len(parts) == 1:
        count = _value(readers[0], "split.count")
        if count is not None and int(count) > 1:
            raise ModelMetadataError(
                f"GGUF file {path} is part of a model split in {int(count)} parts (split.count) but its name "
                "does not follow PREFIX-00001-of-0000N.gguf, so the other parts cannot be found: keep the "
                "names llama.cpp's gguf-split gave them"
            )
        return
    for i, (part, reader) in enumerate(zip(parts, readers, strict=True)):
        no, count = _value(reader, "split.no"), _value(reader, "split.count")
        if no is None or count is None or int(no) != i or int(count) != len(parts):
            raise ModelMetadataError(
                f"split GGUF {path}: part {part.name} has split.no {no} and split.count {count}, expected "
                f"{i} and {len(parts)}: the parts come from different files"
            )
    expected = _value(readers[0], "split.tensors.count")
    if expected is not None and int(expected) != len(tensors.info):
        raise ModelMetadataError(
            f"split GGUF {path}: the parts hold {len(tensors.info)} tensors, split.tensors.count says "
            f"{int(expected)}: a part is damaged or from another model"
        )


def _int_key(reader: Any, key: str, where: str, default: int | None = None) -> int:
    value = _value(reader, key)
    if value is None:
        if default is not None:
            return default
        raise ModelMetadataError(f"{where}: metadata key {key} is missing; a GGUF of this architecture "
                                 "has it")
    if isinstance(value, list):  # per-layer values (e.g. head counts varying by layer)
        if not value or len(set(value)) != 1:
            raise ModelMetadataError(f"{where}: {key} varies by layer ({value[:8]}...); only models with the "
                                     "same shape in every layer are supported")
        value = value[0]
    if int(value) < 1:
        raise ModelMetadataError(f"{where}: {key} must be positive, got {value}")
    return int(value)


def llama3_rope_factors(head_dim: int, theta: float, factor: float, low_freq_factor: float = 1.0,
                        high_freq_factor: float = 4.0, original_positions: int = 8192) -> list[float]:
    """The per-frequency factors llama.cpp's converter writes to `rope_freqs.weight` for Llama 3's rope
    scaling (one per pair of dimensions, in [1, factor])."""
    low_wavelen = original_positions / low_freq_factor
    high_wavelen = original_positions / high_freq_factor
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return out


def _llama3_scaling(readers: list[Any], head_dim: int, theta: float, where: str) -> dict[str, float | str]:
    """Llama 3's rope scaling recognised from a `rope_freqs.weight` tensor (module docstring)."""
    tensor = next((t for r in readers for t in r.tensors if t.name == "rope_freqs.weight"), None)
    if tensor is None:
        return {}
    import numpy as np

    stored = np.asarray(tensor.data, dtype=np.float64).ravel()
    factor = float(stored.max())
    for original in (8192, 4096, 2048, 16384, 32768):  # Llama 3.1/3.2: 8192
        expected = np.asarray(llama3_rope_factors(head_dim, theta, factor, original_positions=original))
        if expected.shape == stored.shape and np.allclose(stored, expected, rtol=1e-4, atol=1e-5):
            return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": original}
    raise ModelMetadataError(
        f"{where}: the rope_freqs.weight tensor ({stored.size} factors, max {factor:g}) is not Llama 3's "
        "rope scaling with low_freq_factor 1 and high_freq_factor 4; write a model file with its "
        "rope_scaling (docs/models.md) and give the weights with --weights"
    )


def _rope_scaling(reader: Any, arch: str, readers: list[Any], head_dim: int, theta: float,
                  where: str) -> dict[str, float | str]:
    kind = _value(reader, f"{arch}.rope.scaling.type")
    factor = _value(reader, f"{arch}.rope.scaling.factor")
    original = _value(reader, f"{arch}.rope.scaling.original_context_length")
    if kind is None and _value(reader, f"{arch}.rope.scale_linear") is not None:
        kind, factor = "linear", _value(reader, f"{arch}.rope.scale_linear")
    if kind in (None, "none"):
        return _llama3_scaling(readers, head_dim, theta, where)
    if kind not in ("linear", "yarn"):
        raise ModelMetadataError(f"{where}: {arch}.rope.scaling.type {kind!r} is not supported (linear, "
                                 "yarn or none)")
    if factor is None or not float(factor) > 0:
        raise ModelMetadataError(f"{where}: {arch}.rope.scaling.factor must be a positive number with "
                                 f"rope scaling {kind}, got {factor!r}")
    if float(factor) == 1.0:
        return {}
    scaling: dict[str, float | str] = {"rope_type": str(kind), "factor": float(factor)}
    if original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    return scaling


def _bytes_per_param(tensors: _Tensors) -> int | None:
    """4 (all weight matrices F32), 2 (F16 / BF16), else None: a quantised file."""
    kinds = {kind for shape, kind in tensors.info.values() if len(shape) >= 2}
    if kinds == {"F32"}:
        return 4
    if kinds and kinds <= {"F16", "BF16"}:
        return 2
    return None


def spec_from_gguf(path: Path, name: str) -> ModelSpec:
    """The ModelSpec named `name` that the GGUF at `path` (a single file or the first part of a split one)
    describes (module docstring); ModelMetadataError naming the file and key."""
    where = f"GGUF file {path}"
    parts = gguf_parts(path)
    readers = [_reader(p) for p in parts]
    reader = readers[0]
    tensors = _tensors(readers)
    _check_split(path, parts, readers, tensors)
    arch = _value(reader, "general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ModelMetadataError(
            f"{where}: architecture {arch!r} (general.architecture) is not supported; the runtime runs "
            f"{', '.join(GGUF_ARCHITECTURES)} models (Llama, SmolLM, Qwen2 / Qwen2.5, ...). For the "
            "simulator alone, describe the model in a model file (docs/models.md)"
        )
    hidden = _int_key(reader, f"{arch}.embedding_length", where)
    heads = _int_key(reader, f"{arch}.attention.head_count", where)
    kv_heads = _int_key(reader, f"{arch}.attention.head_count_kv", where, default=heads)
    if heads % kv_heads:
        raise ModelMetadataError(f"{where}: {arch}.attention.head_count {heads} is not a multiple of "
                                 f"{arch}.attention.head_count_kv {kv_heads}")
    head_dim = _int_key(reader, f"{arch}.attention.key_length", where, default=hidden // heads)
    k_shape = tensors.shape("blk.0.attn_k.weight")
    if k_shape is not None and k_shape[-1] != kv_heads * head_dim:
        raise ModelMetadataError(
            f"{where}: blk.0.attn_k.weight has {k_shape[-1]} outputs, but {kv_heads} KV heads x head dim "
            f"{head_dim} make {kv_heads * head_dim}: the metadata does not describe the tensors"
        )
    embed = tensors.shape("token_embd.weight")
    if embed is None:
        raise ModelMetadataError(f"{where}: no token_embd.weight tensor in {len(parts)} part(s); the file is "
                                 "not a complete model")
    theta = float(_value(reader, f"{arch}.rope.freq_base") or 10000.0)
    scaling = _rope_scaling(reader, arch, readers, head_dim, theta, where)
    positions = _int_key(reader, f"{arch}.context_length", where)
    if scaling.get("original_max_position_embeddings") and scaling["rope_type"] != "llama3":
        positions = max(positions, round(float(scaling["original_max_position_embeddings"]) *
                                         float(scaling["factor"])))
    label = _value(reader, "general.name")
    described = f"GGUF metadata of {path.resolve()}" + (f" ({label})" if label else "")
    if len(parts) > 1:
        described += f", split in {len(parts)} parts"
    return ModelSpec(
        name=name, hf_id=f"local:{path.resolve()}", architecture=str(arch),
        n_layers=_int_key(reader, f"{arch}.block_count", where), hidden_size=hidden, n_qo_heads=heads,
        n_kv_heads=kv_heads, head_dim=head_dim,
        ffn_size=_int_key(reader, f"{arch}.feed_forward_length", where),
        vocab_size=embed[-1], rope_theta=theta, max_position_tokens=positions,
        tied_embeddings=tensors.shape("output.weight") is None,
        qkv_bias=tensors.shape("blk.0.attn_q.bias") is not None, source=described, rope_scaling=scaling,
        bytes_per_param=_bytes_per_param(tensors),
    )
