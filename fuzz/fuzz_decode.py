"""Fuzz ``kbatch.decode``: CRC on and off, a small ``max_decompressed_size``, read_committed.

Input layout (``fuzz/make_seeds.py`` writes seeds in it)::

    flags   uint8   bit 0: verify_crc; bit 1: a small max_decompressed_size; bit 2: read_committed
                    with the ABORT markers in the input; bit 3: read_committed with aborted
                    transactions made up from the input's own transactional batches; bit 4: a
                    last_stable_offset too
    limit   uint8   max_decompressed_size = limit * 256 bytes when bit 1 is set
    data    bytes   the buffer handed to kbatch.decode

Oracle (``fuzz/oracle.py``): only kbatch errors escape, each with a position inside the
input; an error's ``.partial`` equals decoding the bytes before the bad batch; every span of a
result lies inside its ``data``; read_committed returns a subset of what read_uncommitted
returns, record for record, and fails exactly when it fails.

Run ``python fuzz/fuzz_decode.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import kbatch
    import kbatch.codec._txn  # imported lazily by decode: instrument it too
    from kbatch.errors import KBatchError

import oracle


def _decode(data: bytes, **options: Any) -> tuple[Any, KBatchError | None]:
    try:
        table = kbatch.decode(data, **options)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        return None, oracle.check_error(exc, len(data))
    return table, None


def _one(data: bytes, options: dict[str, Any]) -> tuple[Any, KBatchError | None]:
    table, err = _decode(data, **options)
    if err is None:
        oracle.check_table(table, len(data))
        oracle.check(table.truncated == (table.consumed_bytes < len(data)), "truncated disagrees with consumed_bytes")
        return table, None
    partial = err.partial
    oracle.check(partial is not None, f"no .partial on {err!r}")
    oracle.check_table(partial)
    where = err.batch_position
    oracle.check(0 <= where <= err.position, f"batch_position {where} not before position {err.position}: {err!r}")
    before, err2 = _decode(data[:where], **options)
    oracle.check(err2 is None, f"the bytes before the bad batch fail too: {err2!r} (after {err!r})")
    oracle.same_content(partial, before, f".partial of {err!r} vs decoding the {where} bytes before the bad batch")
    return None, err


def _made_up_aborts(table: Any) -> list[tuple[int, int]]:
    b = table.batches
    txn = b[b["is_transactional"] & ~b["is_control"]]
    return [(int(p), int(o)) for p, o in zip(txn["producer_id"][::2], txn["base_offset"][::2], strict=True)]


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 2:
        return
    flags, limit, data = raw[0], raw[1], raw[2:]
    options: dict[str, Any] = {"verify_crc": bool(flags & 1)}
    if flags & 2:
        options["max_decompressed_size"] = limit * 256
    table, err = _one(data, options)
    if not flags & 12:
        return
    committed: dict[str, Any] = {"isolation_level": "read_committed"}
    if flags & 8 and table is not None:
        committed["aborted_transactions"] = _made_up_aborts(table)
    if flags & 16 and table is not None and len(table.records):
        committed["last_stable_offset"] = int(table.records["offset"][len(table.records) // 2])
    ctable, cerr = _decode(data, **options, **committed)
    if err is not None:
        oracle.check(cerr is not None and type(cerr) is type(err) and cerr.position == err.position,
                     f"read_committed gives {cerr!r} where read_uncommitted raised {err!r}")
        return
    oracle.check(cerr is None, f"read_committed raised {cerr!r} where read_uncommitted did not")
    oracle.check_table(ctable, len(data))
    def same(row: tuple[Any, ...]) -> tuple[Any, ...]:  # all but the batch index, which dropping batches moves
        return row[:4] + row[5:]

    rows: dict[int, list[tuple[Any, ...]]] = {}
    for row in oracle.content(table)[0]:
        rows.setdefault(row[0], []).append(same(row))
    for row in oracle.content(ctable)[0]:
        oracle.check(same(row) in rows.get(row[0], []),
                     f"read_committed returned record {row[0]}, which read_uncommitted did not (or not so)")

def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
