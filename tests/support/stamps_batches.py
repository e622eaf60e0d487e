"""Batch buffers for the stamps walk tests: every codec, out-of-order timestamps (negative
deltas), LogAppendTime, control and legacy batches; corruption that keeps or fixes the CRCs."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from crc32c import crc32c
from hypothesis import strategies as st

import kbatch
from kbatch._wire import ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET
from kbatch.codec._core import decode, scan
from kbatch.codec._legacy import encode_legacy


@st.composite
def one_batch(draw: Any) -> bytes:
    """One batch: v2 data (any codec, either timestamp type), a control marker or a legacy set."""
    kind = draw(st.sampled_from(["data"] * 6 + ["control", "legacy"]))
    base = draw(st.integers(0, 1 << 40))
    if kind == "control":
        return kbatch.encode_control(draw(st.sampled_from(["commit", "abort"])), 7, 0, base_offset=base,
                                     timestamp=draw(st.integers(0, 1 << 41)))
    n = draw(st.integers(1, 8))
    start = draw(st.integers(0, 1 << 41))
    stamps = [start + d for d in draw(st.lists(st.integers(-5000, 5000), min_size=n, max_size=n))]
    values = [draw(st.binary(max_size=40)) for _ in range(n)]
    if kind == "legacy":
        return encode_legacy(values, timestamps=stamps, compression=draw(st.integers(0, 3)), base_offset=base)
    headers = [[("h", draw(st.binary(max_size=5)))] if draw(st.booleans()) else None for _ in range(n)]
    return kbatch.encode(values, timestamps=stamps, headers=headers, base_offset=base,
                         compression=draw(st.integers(0, 4)),
                         timestamp_type=draw(st.sampled_from(["create", "log_append"])))


def batches() -> st.SearchStrategy[bytes]:
    """Several batches back to back."""
    return st.lists(one_batch(), min_size=1, max_size=6).map(b"".join)


def fix_crcs(data: bytes) -> bytes:
    """``data`` with the CRC-32C of every v2 batch whose frame is intact set to match its bytes
    (so that corrupt records pass the CRC check and reach the record checks)."""
    buf = bytearray(data)
    pos = 0
    while len(buf) - pos >= LOG_OVERHEAD + 9:
        length = struct.unpack_from(">i", buf, pos + LENGTH_OFFSET)[0]
        if length < 14 or length > len(buf) - pos - LOG_OVERHEAD:
            break
        if buf[pos + MAGIC_OFFSET] == 2 and length + LOG_OVERHEAD > ATTRIBUTES_OFFSET:
            end = pos + LOG_OVERHEAD + length
            struct.pack_into(">I", buf, pos + CRC_OFFSET, crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET : end])))
        pos += LOG_OVERHEAD + length
    return bytes(buf)


def one(data: bytes, position: int) -> bytes:
    """The frame at ``position`` alone."""
    length = struct.unpack_from(">i", data, position + LENGTH_OFFSET)[0]
    return data[position : position + LOG_OVERHEAD + length]


def decoded_alone(data: bytes, verify_crc: bool) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per batch framed in ``data`` (as scan frames them): (offsets, timestamps) of its
    records decoded alone, or None when decode rejects it."""
    heads, _, _ = scan(data)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for p in heads["position"].tolist():
        try:
            t = decode(one(data, p), verify_crc=verify_crc)
        except kbatch.CorruptRecordError:
            out.append(None)
            continue
        out.append((t.records["offset"], t.records["timestamp"]))
    return out
