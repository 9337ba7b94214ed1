"""ShadowKV's chunk selection and the device's value cache (see shadowkv.py for the method).

Selection: landmark scores of the query (per query head softmax of q . landmark / sqrt(128) over the
candidate chunks, the max over the GQA group: ShadowKV's pooling, kv_cache.py:289-293; the scale is
ShadowKV's fixed 1/sqrt(128) whatever the head dim, kv_cache.py:289, 591 and 633; the attention itself
keeps the model's 1/sqrt(d)), the top-k chunks,
k = the budget's room after sink, recent and outliers; `plan_reuse` against the chunks the device holds.
Value cache: only the selected chunks the device does not hold move (ShadowKV's offsets copy), and the
device then holds exactly this step's chunks.

Shapes: b batch, Hq / Hkv query / KV heads, d head dim, p chunk size, C chunks, k selected, K slots.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from freekv_runtime.policies._reuse import ReusePlan, plan_reuse
from freekv_runtime.policies._shadowkv_layer import ShadowKVLayer
from freekv_runtime.recall import DeviceStreams, _on

__all__ = ["LANDMARK_SCALE", "chunk_scores", "install_values", "keep_selected", "n_selectable", "plan_chunks"]

LANDMARK_SCALE = 1.0 / math.sqrt(128)  # bytedance/ShadowKV models/kv_cache.py:289, 591, 633


def n_selectable(ls: ShadowKVLayer, budget_tokens: int) -> int:
    """k: the chunks the budget leaves after sink, recent and outliers (at most the candidates)."""
    room = (budget_tokens - ls.sink_k.shape[2] - ls.recent_k.shape[2]) // ls.chunk_size
    n_out, n_chunks = ls.outliers.shape[2], ls.landmarks.shape[2]
    return max(0, min(room - n_out, n_chunks - n_out))


def chunk_scores(ls: ShadowKVLayer, q: torch.Tensor) -> torch.Tensor:
    """(b, Hkv, C) float32: per query head softmax of q . landmark / sqrt(128) over the candidates, max over
    the group (ShadowKV's pooling, kv_cache.py:289-293); -inf on outlier chunks. q (b, Hq, d)."""
    b, hq, d = q.shape
    hkv, n_chunks = ls.landmarks.shape[1], ls.landmarks.shape[2]
    qg = q.float().reshape(b, hkv, hq // hkv, d)
    raw = qg @ ls.landmarks.float().transpose(-1, -2) * LANDMARK_SCALE  # (b, Hkv, G, C)
    outlier = torch.zeros(b, hkv, n_chunks, dtype=torch.bool, device=q.device)
    outlier.scatter_(2, ls.outliers, True)
    probs = torch.softmax(raw.masked_fill(outlier[:, :, None], float("-inf")), dim=-1).amax(dim=2)
    return probs.masked_fill(outlier, float("-inf"))


def plan_chunks(ls: ShadowKVLayer, q: torch.Tensor, budget_tokens: int) -> ReusePlan:
    """Top-k chunks for q (b, Hq, d) and their reuse plan against the chunks the device holds."""
    k = n_selectable(ls, budget_tokens)
    first = ls.sink_k.shape[2] // ls.chunk_size  # chunk id of the region's first chunk
    if k == 0:  # nothing to select (no candidate chunks, or no room): the device keeps no chunk
        top = np.zeros((*ls.resident.shape[:2], 0), np.int64)
        return plan_reuse(top, ls.resident, np.full(ls.resident.shape, -np.inf))
    scores = chunk_scores(ls, q)
    top = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k].cpu().numpy() + first
    held = np.maximum(ls.resident - first, 0)  # resident chunks are always candidates (never outliers)
    resident_scores = np.take_along_axis(scores.cpu().numpy(), held, axis=-1)
    resident_scores = np.where(ls.resident < 0, -np.inf, resident_scores)
    return plan_reuse(top, ls.resident, resident_scores)


def keep_selected(ls: ShadowKVLayer, selected: np.ndarray) -> np.ndarray:
    """The device holds exactly this step's chunks (as ShadowKV's buffer): free the other slots.
    selected (b, Hkv, k) ascending ids -> (b, Hkv, k) the slot of each."""
    match = ls.resident[..., None, :] == selected[..., :, None]  # (b, Hkv, k, K)
    ls.resident[~match.any(axis=-2)] = -1
    return match.argmax(axis=-1)


def install_values(ls: ShadowKVLayer, source_v: torch.Tensor, seq: np.ndarray, head: np.ndarray,
                   page: np.ndarray, slot: np.ndarray, streams: DeviceStreams) -> torch.cuda.Event | None:
    """Copy chunks' values (absolute token positions in source_v (b, Hkv, N, d), host or device) into
    their slots. From the host on CUDA: one gather into a pinned buffer, one copy on the copy stream;
    returns the event the attention waits on."""
    if len(seq) == 0:
        return None
    p, device = ls.chunk_size, ls.device
    tok = torch.as_tensor(page[:, None] * p + np.arange(p)[None, :])
    s, h = torch.as_tensor(seq)[:, None], torch.as_tensor(head)[:, None]
    rows = source_v[s.to(source_v.device), h.to(source_v.device), tok.to(source_v.device)]  # (n, p, d)
    dev_s, dev_h = torch.as_tensor(seq, device=device), torch.as_tensor(head, device=device)
    dev_slot = torch.as_tensor(slot, device=device)
    if rows.device == ls.slots_v.device:
        ls.slots_v[dev_s, dev_h, dev_slot] = rows
        return None
    streams.wait(streams.record(), streams.copy)  # the slots' last readers ran first
    with _on(streams.copy):
        ls.slots_v[dev_s, dev_h, dev_slot] = rows.pin_memory().to(device, non_blocking=True)
    return streams.record(streams.copy)
