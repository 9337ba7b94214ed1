"""Integer and float packing helpers of the trace payloads."""

from __future__ import annotations

import numpy as np
import pytest

from traces.varint import (
    decode_uvarints,
    encode_uvarints,
    gap_decode,
    gap_encode,
    shuffle_bytes,
    unshuffle_bytes,
    zigzag_decode,
    zigzag_encode,
)


def test_uvarint_round_trip_edges() -> None:
    values = np.array([0, 1, 127, 128, 255, 16383, 16384, 2**31 - 1, 2**32, 2**63 - 1], dtype=np.uint64)
    data = encode_uvarints(values)
    assert data[:4] == bytes([0, 1, 127, 0x80]) and data[4] == 1  # 128 = 0x80 0x01
    assert np.array_equal(decode_uvarints(data), values)


def test_uvarint_random_round_trip() -> None:
    rng = np.random.default_rng(3)
    values = (rng.integers(0, 2**62, 2000, dtype=np.int64) >> rng.integers(0, 62, 2000)).astype(np.uint64)
    assert np.array_equal(decode_uvarints(encode_uvarints(values)), values)
    assert encode_uvarints(np.zeros(0, np.int64)) == b""
    assert decode_uvarints(b"").size == 0


def test_uvarint_rejects_stream_cut_inside_a_value() -> None:
    with pytest.raises(ValueError, match="ends inside a value"):
        decode_uvarints(encode_uvarints(np.array([5, 300]))[:-1])


def test_zigzag_round_trip() -> None:
    values = np.array([0, -1, 1, -2, 2, -(2**40), 2**40], dtype=np.int64)
    z = zigzag_encode(values)
    assert z[:5].tolist() == [0, 1, 2, 3, 4]
    assert np.array_equal(zigzag_decode(z), values)


def test_gap_coding_with_empty_runs() -> None:
    ids = np.array([3, 5, 9, 0, 7, 8], dtype=np.int64)
    counts = np.array([3, 0, 1, 0, 2, 0])
    gaps = gap_encode(ids, counts)
    assert gaps.tolist() == [3, 2, 4, 0, 7, 1]
    assert np.array_equal(gap_decode(gaps, counts), ids)
    assert gap_decode(np.zeros(0, np.int64), np.zeros(3, np.int64)).size == 0


def test_byte_shuffle_round_trip_keeps_nan_bits() -> None:
    values = np.array([0.5, np.nan, -1.25, 1e-30], dtype=np.float32)
    values[1] = np.frombuffer(b"\x01\x00\xc0\x7f", dtype=np.float32)[0]  # a NaN with a payload
    data = shuffle_bytes(values)
    assert data[:4] == values.view(np.uint8)[0::4].tobytes()
    back = unshuffle_bytes(data, "<f4", values.size)
    assert back.tobytes() == values.tobytes()
