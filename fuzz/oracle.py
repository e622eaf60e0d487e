"""Oracles shared by the atheris harnesses (``fuzz/fuzz_*.py``).

A harness calls kbatch on fuzzed bytes and hands the outcome to these checks; a check that
fails raises :class:`Finding` (an ``AssertionError``), which atheris reports as a crash and
saves the input for. What counts as correct:

* only kbatch's own exceptions escape (:class:`kbatch.KBatchError` subclasses, which for the
  protocol codec means ``ProtocolError``), each with a byte position;
* every span a table holds (record keys and values, header keys and values) lies inside
  ``table.data``, and every row points at rows that exist;
* an error from ``kbatch.decode`` carries ``.partial``, equal to decoding the bytes before
  the bad batch.

Known defects (issue 15) being fixed elsewhere are tolerated only when named in the
``KBATCH_FUZZ_KNOWN`` environment variable (comma-separated), so a run can stay green while
their fixes are under way and turns red again as soon as the name is dropped:

``index``
    a read through ``.index`` / ``.timeindex`` differs from the same read without them
    (defects 1 and 2);
``client_id``
    ``decode_request`` raises ``UnicodeDecodeError`` for a non-UTF-8 header ``client_id``
    (defect 6).

and defects these harnesses found (each with an ``xfail`` test in
``tests/test_fuzz_findings.py``):

``request_version``
    ``decode_request`` with a version the API does not have raises ``ProtocolError`` without
    a position;
``map_keys``
    a Protobuf map whose entries repeat a key keeps every entry (``fuzz_protobuf``); upb and the
    Protobuf spec keep the last one ("if there are duplicate map keys the last key seen is used").
    Fixed: the kernel keeps the last entry of each key;
``proto_tags``
    a Protobuf tag written as a varint of more than 5 bytes, or above 2**32 - 1 (a field number
    past 2**29 - 1), is read (``fuzz_protobuf``); upb refuses the message, protobuf-java reads
    the tag's low 32 bits. Fixed: the record is an error (``E_LONG_TAG``).

``avro_map_keys``
    an Avro map whose entries repeat a key keeps every entry (``fuzz_avro_evolution``, in a
    mutated body); fastavro (a dict) and Java's ``GenericDatumReader`` (a ``HashMap``, so Spark's
    ``from_avro``) keep one entry per key, the last value where the key first stood. Fixed: the
    kernel keeps the last value of each key where it first stood.

Every name is a defect to fix; drop it from the variable when its fix lands.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from kbatch.errors import CRCError, KBatchError

__all__ = [
    "KNOWN",
    "Finding",
    "check",
    "check_error",
    "check_table",
    "content",
    "known",
    "same",
    "same_content",
]

#: Known defects the oracles tolerate in this run (see the module docstring).
KNOWN = frozenset(k.strip() for k in os.environ.get("KBATCH_FUZZ_KNOWN", "").split(",") if k.strip())


def known(name: str) -> bool:
    """Whether the known defect ``name`` is tolerated in this run."""
    return name in KNOWN


class Finding(AssertionError):
    """An oracle failed: kbatch did something it must not do with this input."""


def check(ok: object, what: str) -> None:
    """Raise :class:`Finding` with ``what`` unless ``ok``."""
    if not ok:
        raise Finding(what)


def check_error(exc: BaseException, size: int | None = None, *, positioned: bool = True) -> KBatchError:
    """Check that ``exc`` is a kbatch error with a position (inside ``size`` bytes when given).

    ``positioned=False`` asks only for the class: an error about a whole file or about how
    records fit together (a change to a partition no record created) has no byte to name.
    Anything else is re-raised unchanged, so atheris reports the original traceback.
    """
    if not isinstance(exc, KBatchError):
        raise exc
    check(isinstance(exc, ValueError), f"{type(exc).__name__} is not a ValueError: {exc}")
    if isinstance(exc, CRCError):  # lost when an error is rebuilt to add context (issue 26)
        check(hasattr(exc, "stored") and hasattr(exc, "computed"), f"a CRCError without stored/computed: {exc!r}")
    if not positioned:
        return exc
    check(isinstance(exc.position, int) and exc.position >= 0, f"no position: {exc!r}")
    if size is not None:
        check(exc.position <= size, f"position {exc.position} past the {size}-byte input: {exc!r}")
    return exc


def _spans(start: np.ndarray, length: np.ndarray, size: int, what: str) -> None:
    start = start.astype(np.int64)
    length = length.astype(np.int64)
    null = length < 0
    check((length >= -1).all(), f"{what}: a length below -1")
    ok = null | ((start >= 0) & (start + np.maximum(length, 0) <= size))
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise Finding(f"{what} {i}: span {int(start[i])}+{int(length[i])} outside data of {size} bytes")


def check_table(table: Any, input_size: int | None = None) -> None:
    """Every span inside ``table.data``, every row reference inside its table."""
    size = memoryview(table.data).nbytes
    r, b, h = table.records, table.batches, table.headers
    _spans(r["key_start"], r["key_length"], size, "record key")
    _spans(r["value_start"], r["value_length"], size, "record value")
    _spans(h["key_start"], h["key_length"], size, "header key")
    _spans(h["value_start"], h["value_length"], size, "header value")
    check((h["key_length"] >= 0).all(), "a header with a null key")
    hs = r["headers_start"].astype(np.int64)
    hc = r["headers_count"].astype(np.int64)
    check(((hs >= 0) & (hc >= 0) & (hs + hc <= len(h))).all(), "a record's headers outside the header rows")
    check(((r["batch"] >= 0) & (r["batch"] < len(b))).all(), "a record's batch outside the batch rows")
    check(((b["first_record"] >= 0) & (b["first_record"] <= len(r))).all(), "a batch's first record outside")
    if input_size is not None:
        check(0 <= table.consumed_bytes <= input_size, f"consumed_bytes {table.consumed_bytes} of {input_size}")


def content(table: Any) -> tuple[Any, ...]:
    """What a table says, independent of where its spans point: numbers and the bytes themselves.

    One row per record: offset, timestamp, sequence, attributes, batch row, key, value, and the
    headers as ``((key, value), ...)``; then the batch rows and ``next_offset``. Built from whole
    columns (``tolist``), not record by record: the logdir harness calls it on every read.
    """
    data = bytes(memoryview(table.data).cast("B"))

    def pieces(rows: Any, name: str) -> list[bytes | None]:
        return [None if n < 0 else data[s:s + n]
                for s, n in zip(rows[f"{name}_start"].tolist(), rows[f"{name}_length"].tolist(), strict=True)]

    r, h = table.records, table.headers
    hk, hv = pieces(h, "key"), pieces(h, "value")
    head = list(zip(hk, hv, strict=True))
    numbers = zip(r["offset"].tolist(), r["timestamp"].tolist(), r["sequence"].tolist(), r["attributes"].tolist(),
                  r["batch"].tolist(), strict=True)
    rows = [(*n, k, v, tuple(head[a:a + c]))
            for n, k, v, a, c in zip(numbers, pieces(r, "key"), pieces(r, "value"), r["headers_start"].tolist(),
                                     r["headers_count"].tolist(), strict=True)]
    batches = table.batches.tolist()
    return rows, batches, table.next_offset


def same_content(a: Any, b: Any, what: str) -> None:
    """Raise :class:`Finding` unless tables ``a`` and ``b`` hold the same records and batches."""
    ca, cb = content(a), content(b)
    if ca == cb:
        return
    ra, rb = ca[0], cb[0]
    detail = f"{len(ra)} vs {len(rb)} records"
    if len(ra) == len(rb):
        i = next((i for i, (x, y) in enumerate(zip(ra, rb, strict=True)) if x != y), None)
        detail += f"; first difference at record {i}" if i is not None else "; batches or next_offset differ"
    raise Finding(f"{what}: {detail} (offsets {[x[0] for x in ra][:20]} vs {[x[0] for x in rb][:20]})")


def same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to itself (a mutated float may be any NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)
