"""Validation of a record against the trace's (L, H) before it is encoded, with messages naming the field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from traces.errors import TraceError
from traces.page_keys import EMPTY_KEYS, ID_LIMIT, heads_of, keys_from_ids

__all__ = ["RecordChecker", "U32_LIMIT"]

U32_LIMIT = 1 << 32


class RecordChecker:
    """Validation of one record against the trace's (L, H), with messages naming the field."""

    def __init__(self, what: str, n_layers: int, n_kv_heads: int) -> None:
        self.what, self.n_layers, self.n_kv_heads = what, n_layers, n_kv_heads

    def fail(self, message: str) -> TraceError:
        return TraceError(f"{self.what}: {message}")

    def uint(self, name: str, value: object, limit: int = U32_LIMIT) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < limit:
            raise self.fail(f"{name} must be an integer in [0, {limit}), got {value!r}")
        return int(value)

    def grid(self, name: str, value: object, kind: str) -> np.ndarray:
        """(L, H) array of dtype kind 'f' (float), 'b' (bool) or 'i' (non-negative int)."""
        a = np.asarray(value)
        shape = (self.n_layers, self.n_kv_heads)
        if a.shape != shape:
            raise self.fail(f"{name} must have shape (n_layers, n_kv_heads) = {shape}, got {a.shape}")
        ok = {"f": a.dtype.kind == "f", "b": a.dtype == np.bool_, "i": a.dtype.kind in "iu"}[kind]
        if not ok:
            wanted = {"f": "a float (float32) array", "b": "a bool array", "i": "an integer array"}[kind]
            raise self.fail(f"{name} must be {wanted}, got dtype {a.dtype}")
        if kind == "i" and a.size and (a.min() < 0 or a.max() >= ID_LIMIT):
            raise self.fail(f"{name} must hold integers in [0, 2**31), got range [{a.min()}, {a.max()}]")
        return a

    def nested_keys(self, name: str, nested: object) -> np.ndarray:
        """selected/missed [l][h] sorted int arrays -> sorted int64 keys."""
        if not isinstance(nested, Sequence) or len(nested) != self.n_layers:
            got = len(nested) if isinstance(nested, Sequence) else type(nested).__name__
            raise self.fail(f"{name} must be a sequence of n_layers={self.n_layers} layers, got {got}")
        for li, layer in enumerate(nested):
            if not isinstance(layer, Sequence) or len(layer) != self.n_kv_heads:
                raise self.fail(f"{name}[{li}] must be a sequence of n_kv_heads={self.n_kv_heads} arrays")
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for layer in nested for a in layer]
        for i, a in enumerate(arrays):
            if a.ndim != 1 or (a.dtype.kind not in "iu" and a.size):
                li, h = divmod(i, self.n_kv_heads)
                raise self.fail(f"{name}[{li}][{h}] must be a 1-D integer array, got {a.dtype} {a.shape}")
        counts = np.array([a.size for a in arrays], dtype=np.int64)
        ids = np.concatenate(arrays).astype(np.int64, copy=False) if arrays else EMPTY_KEYS
        if ids.size == 0:
            return EMPTY_KEYS
        if ids.min() < 0 or ids.max() >= ID_LIMIT:
            raise self.fail(f"{name} page ids must lie in [0, 2**31), got range [{ids.min()}, {ids.max()}]")
        keys = keys_from_ids(counts, ids)
        bad = np.flatnonzero(np.diff(keys) <= 0)
        if bad.size:
            head = int(heads_of(keys[bad[0] + 1 : bad[0] + 2])[0])
            li, h = divmod(head, self.n_kv_heads)
            raise self.fail(f"{name}[{li}][{h}] must be sorted ascending without duplicates")
        return keys

    def timings(self, timings: object) -> dict[str, float]:
        if not isinstance(timings, Mapping):
            raise self.fail(f"timings_s must be a dict of name -> seconds, got {type(timings).__name__}")
        out: dict[str, float] = {}
        for name, value in timings.items():
            if not isinstance(name, str) or not name:
                raise self.fail(f"timings_s keys must be non-empty strings, got {name!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise self.fail(f"timings_s[{name!r}] must be a number of seconds, got {value!r}")
            out[name] = float(value)
        return out
