"""What a policy's `prepare` found about the model, as recorded in a trace: `meta.extra["policy_probe"]`.

The runtime records `KVPolicy.prepared_metadata()` there (a small JSON object; absent or {} for policies
that probe nothing, and in traces written before it was recorded). Two policies publish one:

- razorattention (its retrieval-head probe):
  `{"retrieval_heads": [[KV head ids] per layer], "retrieval_kv_heads": int, "kv_heads": int,
  "retrieval_share": float, "probe_tokens": int}`; `retrieval_heads` has one list per layer of the
  traced model (sorted KV head indices of the heads that keep the whole context), `retrieval_share` =
  retrieval_kv_heads / kv_heads over all layers, dense ones included.
- infinigen (its skewing calibration): `{"calibration_tokens": int, "partial_ratio": float,
  "skewed_layers": int, "partial_columns_mean": float, "head_dim": int}`.

`retrieval_probe` builds the first from an (L, H) bool array; `retrieval_heads_of` reads it back,
validated against the trace's model (TraceError naming the field otherwise). numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.errors import TraceError
from traces.records import RunMetadata

__all__ = ["PROBE_KEY", "policy_probe", "retrieval_probe", "retrieval_heads_of"]

PROBE_KEY = "policy_probe"  # the key in RunMetadata.extra


def policy_probe(meta: RunMetadata) -> dict[str, Any]:
    """The trace's `meta.extra["policy_probe"]`, {} when absent (older traces, policies without a probe)."""
    probe = meta.extra.get(PROBE_KEY) if isinstance(meta.extra, dict) else None
    return probe if isinstance(probe, dict) else {}


def retrieval_probe(heads: np.ndarray, probe_tokens: int) -> dict[str, Any]:
    """The JSON object of RazorAttention's probe result: heads (L, H) bool retrieval KV heads; probe_tokens
    the probe prompt's length."""
    heads = np.asarray(heads, dtype=bool)
    return {
        "retrieval_heads": [np.flatnonzero(row).tolist() for row in heads],
        "retrieval_kv_heads": int(heads.sum()),
        "kv_heads": int(heads.size),
        "retrieval_share": float(heads.mean()) if heads.size else 0.0,
        "probe_tokens": int(probe_tokens),
    }


def retrieval_heads_of(meta: RunMetadata, where: str = "trace") -> np.ndarray | None:
    """(L, H) bool retrieval KV heads recorded by RazorAttention's probe, on the traced model's shape;
    None when the trace records none. TraceError (naming `where` and the field) when malformed."""
    heads = policy_probe(meta).get("retrieval_heads")
    if heads is None:
        return None
    n_layers, n_heads = meta.model.n_layers, meta.model.n_kv_heads
    field = f"{where}: meta.extra.{PROBE_KEY}.retrieval_heads"
    if not isinstance(heads, list) or len(heads) != n_layers:
        raise TraceError(f"{field} must be a list of {n_layers} lists (one per layer of "
                         f"{meta.model.name}) of KV head indices, got {type(heads).__name__} of length "
                         f"{_len(heads)}")
    out = np.zeros((n_layers, n_heads), dtype=bool)
    for layer, ids in enumerate(heads):
        ok = isinstance(ids, list) and all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h < n_heads for h in ids)
        if not ok:
            raise TraceError(f"{field}[{layer}] must be a list of KV head indices 0-{n_heads - 1}, "
                             f"got {ids!r}")
        out[layer, ids] = True
    return out


def _len(value: object) -> int | None:
    return len(value) if isinstance(value, (list, tuple, str, dict)) else None
