"""Compare a RecordTable with an expected-fields description (the vectors' format)."""

from __future__ import annotations

import kbatch

BATCH_FIELDS = [
    "magic", "base_offset", "batch_length", "partition_leader_epoch", "crc", "attributes",
    "compression", "timestamp_type", "is_transactional", "is_control", "has_delete_horizon",
    "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
    "base_sequence", "record_count",
]


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def check_table(table: kbatch.RecordTable, expect: dict) -> None:
    """Assert every batch and record field of ``expect`` against ``table``."""
    exp_batches = expect["batches"]
    assert len(table.batches) == len(exp_batches)
    data_records = []
    for i, (row, eb) in enumerate(zip(table.batches, exp_batches, strict=False)):
        for field in BATCH_FIELDS:
            if field in eb:
                want = -1 if eb[field] is None else eb[field]  # v0: no timestamp type
                assert row[field] == want, f"batch {i} {field}: {row[field]} != {want}"
        if eb["magic"] < 2:  # legacy entries carry one timestamp (-1 for v0)
            want = -1 if eb.get("timestamp") is None else eb["timestamp"]
            assert row["max_timestamp"] == want == row["base_timestamp"]
            assert row["last_offset_delta"] == 0 and row["producer_id"] == -1
        if eb.get("is_control"):
            control = [r["control"] for r in eb["records"] if "control" in r]
            if control:
                assert row["control_type"] == control[0]["type"]
                assert row["coordinator_epoch"] == control[0]["coordinator_epoch"]
            else:
                assert row["control_type"] == -1
        else:
            assert row["control_type"] == -1
            data_records.extend(eb["records"])
    assert len(table) == len(data_records)
    for i, er in enumerate(data_records):
        rec = table.records[i]
        assert rec["offset"] == er["offset"], i
        assert rec["timestamp"] == (-1 if er["timestamp"] is None else er["timestamp"]), i
        assert rec["sequence"] == er.get("sequence", -1), i
        if "attributes" in er:
            assert rec["attributes"] == er["attributes"], i
        assert _hex(table.key(i)) == er["key"], i
        assert _hex(table.value(i)) == er["value"], i
        got_headers = table.headers(i)
        assert len(got_headers) == len(er["headers"])
        first = int(rec["headers_start"])
        for j, ((k, v), eh) in enumerate(zip(got_headers, er["headers"], strict=False)):
            raw = table.headers[first + j]
            key_bytes = bytes(memoryview(table.data).cast("B")[raw["key_start"] : raw["key_start"] + raw["key_length"]])
            assert key_bytes.hex() == eh.get("key_hex", eh["key"].encode().hex())
            assert k == key_bytes.decode("utf-8", "replace")
            assert _hex(v) == eh["value"]
    assert table.consumed_bytes == expect["consumed_bytes"]
    assert table.truncated == expect["truncated_tail"]
    if exp_batches:
        last = exp_batches[-1]
        assert table.next_offset == last.get("next_offset", last["base_offset"] + last.get("last_offset_delta", 0) + 1)
    else:
        assert table.next_offset is None
