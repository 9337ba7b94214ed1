"""Vectorised integer and float packing used by the trace payloads (numpy only).

- unsigned LEB128 varints: 7 bits per byte, high bit set on every byte but the last of a value;
- zigzag: signed -> unsigned (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...) so small deltas stay one byte;
- gap coding of sorted id runs: the first id of a run as is, then differences to the previous id;
- byte shuffling of float arrays (all first bytes, then all second bytes, ...) so zlib finds the
  repeated exponent bytes.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "encode_uvarints",
    "decode_uvarints",
    "zigzag_encode",
    "zigzag_decode",
    "gap_encode",
    "gap_decode",
    "shuffle_bytes",
    "unshuffle_bytes",
]

_MAX_VARINT_BYTES = 10  # enough for any uint64


def encode_uvarints(values: np.ndarray) -> bytes:
    """LEB128-encode non-negative integers. values: (n,) any integer dtype, all >= 0."""
    v = np.asarray(values).astype(np.uint64, copy=False).ravel()
    if v.size == 0:
        return b""
    n_bytes = np.ones(v.shape, dtype=np.int64)
    for k in range(1, _MAX_VARINT_BYTES):
        more = v >= (np.uint64(1) << np.uint64(7 * k))
        if not more.any():
            break
        n_bytes += more
    ends = np.cumsum(n_bytes)
    starts = ends - n_bytes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    for k in range(int(n_bytes.max())):
        mask = n_bytes > k
        low7 = ((v[mask] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        cont = (n_bytes[mask] > k + 1).astype(np.uint8) << 7
        out[starts[mask] + k] = low7 | cont
    return out.tobytes()


def decode_uvarints(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """Decode a whole LEB128 stream -> (n,) uint64. Raises ValueError on a malformed stream."""
    b = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if b.size == 0:
        return np.zeros(0, dtype=np.uint64)
    ends = np.flatnonzero(b < 0x80)
    if ends.size == 0 or ends[-1] != b.size - 1:
        raise ValueError("varint stream ends inside a value")
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    max_len = int(lengths.max())
    if max_len > _MAX_VARINT_BYTES:
        raise ValueError(f"varint of {max_len} bytes (at most {_MAX_VARINT_BYTES} allowed)")
    out = np.zeros(ends.size, dtype=np.uint64)
    for k in range(max_len):
        mask = lengths > k
        out[mask] |= (b[starts[mask] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return out


def zigzag_encode(values: np.ndarray) -> np.ndarray:
    """(n,) signed int -> (n,) uint64 with small magnitudes mapped to small numbers."""
    v = np.asarray(values, dtype=np.int64)
    return ((v << 1) ^ (v >> 63)).astype(np.uint64)


def zigzag_decode(values: np.ndarray) -> np.ndarray:
    """Inverse of `zigzag_encode`: (n,) uint64 -> (n,) int64."""
    z = np.asarray(values, dtype=np.uint64)
    return ((z >> np.uint64(1)).astype(np.int64)) ^ -((z & np.uint64(1)).astype(np.int64))


def gap_encode(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Gap-code runs of ascending ids.

    ids: (n,) int64, the runs concatenated; counts: (r,) run lengths (sum n). Returns (n,) int64: each
    run's first id as is, then the difference to the previous id of the same run (>= 0 if ascending).
    """
    ids = np.asarray(ids, dtype=np.int64)
    gaps = ids.copy()
    if ids.size:
        gaps[1:] -= ids[:-1]
        starts = _run_starts(counts)
        gaps[starts] = ids[starts]
    return gaps


def gap_decode(gaps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Inverse of `gap_encode`: (n,) gaps and (r,) run lengths -> (n,) int64 ids."""
    gaps = np.asarray(gaps, dtype=np.int64)
    if gaps.size == 0:
        return gaps.copy()
    total = np.cumsum(gaps)
    starts = _run_starts(counts)
    before = np.zeros(starts.size, dtype=np.int64)
    nonzero = starts > 0
    before[nonzero] = total[starts[nonzero] - 1]
    run_of = np.repeat(np.arange(starts.size), np.asarray(counts)[np.asarray(counts) > 0])
    return total - before[run_of]


def _run_starts(counts: np.ndarray) -> np.ndarray:
    """Start offsets of the non-empty runs."""
    counts = np.asarray(counts, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return offsets[counts > 0]


def shuffle_bytes(values: np.ndarray) -> bytes:
    """Little-endian bytes of `values` regrouped by byte position: (n,) itemsize-k -> n*k bytes."""
    a = np.ascontiguousarray(values)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return a.view(np.uint8).reshape(-1, a.dtype.itemsize).T.tobytes()


def unshuffle_bytes(data: bytes | memoryview, dtype: np.dtype | type, count: int) -> np.ndarray:
    """Inverse of `shuffle_bytes`: -> (count,) array of little-endian `dtype` (native copy)."""
    dt = np.dtype(dtype).newbyteorder("<")
    planes = np.frombuffer(data, dtype=np.uint8, count=count * dt.itemsize).reshape(dt.itemsize, count)
    return planes.T.copy().view(dt).ravel().astype(dt.newbyteorder("="), copy=False)
