"""Fuzz the internal-topic decoders (``kbatch.internal``) on records made of fuzzed keys and values.

Input layout (``fuzz/make_seeds.py`` writes seeds in it: every record type of every family
at every version, and records that make sense together)::

    target  uint8   % 5: 0 consumer_offsets, 1 consumer_groups, 2 transactions,
                    3 cluster_metadata, 4 iter_decoded of the family in bits 4-6 of flags
    flags   uint8   bit 0: history=True; bit 1: on_unknown="raw"; bit 2: one record per batch
                    (several batches in the table); bit 3: cluster_metadata at an offset
                    (the middle record); bits 4-6: the family for target 4 (group,
                    transaction, share, metadata, remote_log)
    records         each: uint16 key length (0xFFFF: null), key, uint16 value length
                    (0xFFFF: null), value; big-endian; a cut record ends the list

The records are encoded into batches (``kbatch.encode``) and decoded into one
``RecordTable``, which each function takes as one partition of its topic.

Oracle: nothing but a kbatch error (``KBatchError``; ``InternalRecordError`` names the
record's offset, and a byte only where one is at fault) escapes; every Arrow table returned
validates in full (UTF-8 strings included).

Run ``python fuzz/fuzz_internal.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import kbatch
    from kbatch import internal

import fixtures
import oracle

TABLES = (internal.consumer_offsets, internal.consumer_groups, internal.transactions, internal.cluster_metadata)


def _valid(result: Any) -> None:
    tables = result.values() if isinstance(result, dict) else [result]
    for t in tables:
        t.validate(full=True)


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 2:
        return
    target, flags = raw[0] % 5, raw[1]
    keys, values = fixtures.parse_record_list(raw[2:])
    if not keys:
        return
    data = kbatch.encode(values, keys=keys, timestamps=[1] * len(keys), max_batch_records=1 if flags & 4 else None)
    table = kbatch.decode(data)
    unknown = "raw" if flags & 2 else "raise"
    try:
        if target < 4:
            kw: dict[str, Any] = {"history": bool(flags & 1), "on_unknown": unknown}
            if target == 3 and flags & 8 and not flags & 1:
                kw = {"offset": len(keys) // 2, "on_unknown": unknown}
            _valid(TABLES[target](table, **kw))
        else:
            family = fixtures.FAMILY_ORDER[(flags >> 4) % len(fixtures.FAMILY_ORDER)]
            for e in internal.iter_decoded(table, family, on_unknown=unknown):
                oracle.check(e.record.family == family, f"a {e.record.family} record from the {family} family")
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        oracle.check_error(exc, positioned=False)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
