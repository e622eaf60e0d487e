"""A small, fully typed use of kbatch's public API.

``mypy --strict kbatch examples/typed_usage.py`` checks it against the stubs of the compiled
core (``kbatch/codec/_core.pyi``); ``python examples/typed_usage.py`` runs it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import kbatch
from kbatch import CorruptRecordError, CRCError, RecordTable


def produce() -> bytes:
    """Two batches of three records, then a transaction marker."""
    values: list[bytes | None] = [b"alpha", None, b"gamma"]
    keys: list[bytes | None] = [b"a", b"b", None]
    first = kbatch.encode(
        values,
        keys,
        timestamps=[1_000, 1_001, 1_002],
        headers=[[("trace", b"1")], None, [("trace", None)]],
        base_offset=0,
    )
    builder = kbatch.BatchBuilder(base_offset=3, compression="gzip")
    for i in range(3):
        offset: int = builder.append(b"payload-%d" % i, key=None, timestamp=2_000 + i)
        assert offset == 3 + i
    marker = kbatch.encode_control("commit", producer_id=7, producer_epoch=0, base_offset=6)
    return first + builder.build() + marker


def summarize(table: RecordTable) -> dict[str, int | None]:
    """Column arithmetic: no Python object per record."""
    offsets: npt.NDArray[np.int64] = table.records["offset"]
    timestamps: npt.NDArray[np.int64] = table.records["timestamp"]
    return {
        "records": len(table),
        "batches": int(table.batches.shape[0]),
        "first_offset": int(offsets.min()),
        "max_timestamp": int(timestamps.max()),
        "next_offset": table.next_offset,  # None when nothing was decoded
    }


def decode_or_keep_partial(data: bytes) -> RecordTable | None:
    """Decode, and on corrupt input keep what came before the bad batch."""
    try:
        return kbatch.decode(data)
    except CRCError as err:
        print(f"checksum mismatch at byte {err.position} (batch {err.batch_index})")
    except CorruptRecordError as err:
        print(f"corrupt: {err.reason} at byte {err.position}, field {err.field!r}")
    return None


def main() -> None:
    data = produce()
    table = kbatch.decode(data)
    print(summarize(table))
    for record in table:
        key: bytes | None = record.key
        print(record.offset, key, record.value, record.headers)

    damaged = bytearray(data)
    damaged[30] ^= 0xFF  # inside the first batch's CRC-covered bytes
    assert decode_or_keep_partial(bytes(damaged)) is None
    print(f"kbatch {kbatch.__version__}")


if __name__ == "__main__":
    main()
