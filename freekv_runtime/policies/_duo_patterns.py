"""DuoAttention head patterns shipped with the runtime, and which model each belongs to.

freekv_runtime/patterns/<name>/ holds full_attention_heads.tsv (DuoAttention's format: layers x KV heads
gate values) and provenance.json written by `python -m freekv_runtime.duo_train`, which records the model's
shape and a fingerprint of its weights (the first values of layer 0's key projection). A shipped pattern is
used for a model whose shape and fingerprint match: the model it was trained on, whatever path or name it
was loaded by.
"""

from __future__ import annotations

import json
from pathlib import Path

from freekv_runtime.policies.base import ModelAccess

__all__ = ["PATTERN_FILE", "PROVENANCE_FILE", "PATTERNS_DIR", "fingerprint", "shipped_names",
           "shipped_pattern"]

PATTERN_FILE = "full_attention_heads.tsv"
PROVENANCE_FILE = "provenance.json"
PATTERNS_DIR = Path(__file__).resolve().parent.parent / "patterns"
_FINGERPRINT_VALUES = 16
_FINGERPRINT_RTOL = 1e-2  # of the largest fingerprint value: float32 vs bf16 loads of one model agree


def fingerprint(model: ModelAccess) -> list[float]:
    """The first 16 weights of layer 0's key projection (row-major), as floats."""
    w = model.k_proj(0).weight.detach().flatten()[:_FINGERPRINT_VALUES]
    return [round(float(x), 6) for x in w.float().cpu()]


def _matches(found: list[float], want: list[float]) -> bool:
    if len(found) != len(want):
        return False
    scale = max(abs(x) for x in want) or 1.0
    return all(abs(a - b) <= _FINGERPRINT_RTOL * scale for a, b in zip(found, want, strict=True))


def shipped_names() -> list[str]:
    """The directory names of the shipped patterns (the models they were trained on)."""
    return sorted(p.parent.name for p in PATTERNS_DIR.glob(f"*/{PROVENANCE_FILE}"))


def shipped_pattern(model: ModelAccess) -> Path | None:
    """The shipped pattern directory trained on `model` (same shape and fingerprint), or None."""
    root = PATTERNS_DIR
    if not root.is_dir():
        return None
    shape = [model.shape.n_layers, model.shape.n_kv_heads]
    mine = fingerprint(model)
    for provenance in sorted(root.glob(f"*/{PROVENANCE_FILE}")):
        try:
            meta = json.loads(provenance.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("shape") == shape and _matches(mine, meta.get("fingerprint", [])) \
                and (provenance.parent / PATTERN_FILE).is_file():
            return provenance.parent
    return None
