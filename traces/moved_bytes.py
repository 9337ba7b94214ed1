"""Bytes per moved head-token, by the trace's method: which of K and V a method copies when it fetches,
recalls or evicts a token of one KV head.

Most methods move both the key and the value of each token. ShadowKV moves only values: its keys stay
on the GPU as low-rank pre-RoPE factors and are rebuilt there (freekv_runtime/policies/shadowkv.py:
`fetched_tokens` = value tokens; bytedance/ShadowKV `models/kv_cache.py` ShadowKV_CPU gathers value
chunks only). InfiniGen prefetches the selected tokens' keys and values (freekv_runtime/policies/
infinigen.py; snu-comparch/InfiniGen `kv_selection_controller.py` `select_kv` gathers both), like FreeKV,
Quest and ArkVale recalling pages. Dropping methods evict both. The catalogue entry of each method says
which (traces.catalogue, `MethodEntry.moved_parts`). Plain Python (no numpy, no torch).
"""

from __future__ import annotations

from traces.catalogue import CATALOGUE, runtime_method

__all__ = ["moved_parts", "token_bytes", "token_bytes_basis"]


def moved_parts(method: object) -> tuple[str, ...]:
    """The parts of a head-token `method` moves (its catalogue entry's `moved_parts`): ("K", "V"), or
    ("V",) for ShadowKV; a trace without a (string) method is FreeKV's (K and V)."""
    entry = CATALOGUE.get(runtime_method({"method": method}))
    return entry.moved_parts if entry is not None else ("K", "V")


def token_bytes(method: object, head_dim: int, kv_dtype_bytes: int) -> int:
    """Bytes one moved token of one KV head takes: head_dim x (1 or 2 parts) x kv_dtype_bytes."""
    return head_dim * len(moved_parts(method)) * kv_dtype_bytes


def token_bytes_basis(method: object, head_dim: int, kv_dtype_bytes: int) -> str:
    """The per-token factor in words, e.g. "head_dim 64 x 2 (K and V) x 2 bytes per element"."""
    parts = moved_parts(method)
    which = " and ".join(parts) + (" only" if len(parts) == 1 else "")
    why = f", {method} moves no keys" if len(parts) == 1 and "K" not in parts else ""
    return f"head_dim {head_dim} x {len(parts)} ({which}{why}) x {kv_dtype_bytes} bytes per element"
