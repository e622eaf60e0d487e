"""Decoded value types: ``Records`` (buffer protocol) and ``KeyedList`` (``mapKey`` lookup)."""

from __future__ import annotations

import copy
import pickle
import uuid
from typing import Any

import pytest

import kbatch
from kbatch.protocol import KeyedList, Message, Records, default_schema, parse_message
from kbatch.protocol._records import records_slice

FETCH = default_schema().response("Fetch")
METADATA = default_schema().response("Metadata")


def fetch_bytes(n_partitions: int, size: int = 3000) -> bytes:
    parts = [{"partition_index": i, "records": bytes([i]) * size} for i in range(n_partitions)]
    return FETCH.encode({"responses": [{"topic_id": uuid.UUID(int=1), "partitions": parts}]}, 17)


# ------------------------------------------------------------------ Records


@pytest.mark.parametrize("kernel", [True, False])
def test_records_export_the_buffer_protocol(kernel: bool) -> None:
    fetch = FETCH if kernel else Message(FETCH.spec, kernel=False)
    data = fetch_bytes(6)
    rec = fetch.decode(data, 17)["responses"][0]["partitions"][5]["records"]
    assert type(rec) is Records
    view = memoryview(rec)  # the buffer protocol itself, on every Python version
    assert view.readonly and view.format == "B" and view.nbytes == 3000 == len(rec)
    assert view.obj is rec and view.tobytes() == bytes([5]) * 3000
    assert bytes(rec) == rec.tobytes() == bytearray(rec) == bytes([5]) * 3000
    assert rec.view.obj is data and rec.view == view
    assert rec == bytes([5]) * 3000 and rec == bytearray(rec) and rec == memoryview(rec) and rec == Records(rec)
    assert rec != bytes([5]) * 2999 and rec != "text" and rec != Records(b"")
    assert repr(rec) == "<Records 3000 bytes>"
    with pytest.raises(TypeError, match="unhashable"):
        hash(rec)


def test_records_keep_a_bytearray_input_alive_and_fixed_in_size() -> None:
    data = bytearray(fetch_bytes(4))
    msg = FETCH.decode(data, 17)
    rec = msg["responses"][0]["partitions"][2]["records"]
    assert not memoryview(rec).readonly  # writable input, writable export
    with pytest.raises(BufferError):
        data += b"x"  # the input cannot be resized under the view
    offset = data.find(bytes([2]) * 3000)
    memoryview(rec)[0] = 9  # the same memory, not a copy
    assert data[offset] == 9 and rec.view.obj is data
    del msg, rec
    data += b"x"


def test_records_pickle_copy_and_decode() -> None:
    batch = kbatch.encode([b"v0", b"v1"], keys=[b"k0", None])
    rec = Records(batch)
    clone = pickle.loads(pickle.dumps(rec))
    assert type(clone) is Records and clone == rec and clone.view.obj is not batch
    assert copy.copy(rec) == rec
    assert rec.decode().value(1) == b"v1"
    assert kbatch.decode(rec).key(0) == b"k0"  # any consumer of buffers takes a Records


def test_records_of_other_buffers_and_bounds() -> None:
    import array

    ints = array.array("i", [1, 2, 3])
    rec = Records(ints)
    assert len(rec) == 12 and rec.view.format == "B" and rec.view.obj is ints
    assert records_slice(b"abcdef", 2, 3) == b"cde"
    assert records_slice(b"abcdef", 6, 0) == b""
    for offset, size in ((-1, 2), (5, 2), (0, -1)):
        with pytest.raises(ValueError, match="out of a 6-byte buffer"):
            records_slice(b"abcdef", offset, size)
    with pytest.raises(TypeError):
        Records("not bytes")
    empty = Records.__new__(Records)  # never initialised: empty, not a crash
    assert len(empty) == 0 and empty == b"" and empty.view.nbytes == 0 and memoryview(empty).nbytes == 0
    rec = Records(b"xy")
    with pytest.raises(TypeError):
        rec.__init__(5)
    assert len(rec) == 0 and bytes(rec) == b""


# ------------------------------------------------------------------ encode kernel


@pytest.mark.parametrize("records", [b"x" * 10, b"x" * 5000, bytearray(b"y" * 3000), None])
def test_encode_kernel_matches_python(records: Any) -> None:
    pure = Message(FETCH.spec, kernel=False)
    parts = [{"partition_index": i, "high_watermark": i, "records": records,
              "aborted_transactions": [{"producer_id": i, "first_offset": 2}] * (i % 3)} for i in range(5)]
    msg = {"responses": [{"topic_id": uuid.UUID(int=t), "partitions": parts} for t in range(3)]}
    for version in (4, 12, 17):
        if version < 13:
            for topic in msg["responses"]:
                topic["topic"] = "t"
        assert FETCH.encode(msg, version) == pure.encode(msg, version)
        fast_parts = FETCH.encode_parts(msg, version)
        assert b"".join(fast_parts) == b"".join(pure.encode_parts(msg, version))
        if records is not None and len(records) >= 2048:  # big records are parts of their own, not copies
            assert sum(isinstance(p, memoryview) and p.obj is records for p in fast_parts) == 15


BAD_VALUES: list[tuple[str, Any]] = [
    ("partition_index", 2 ** 31), ("partition_index", None), ("partition_index", "1"), ("error_code", -(2 ** 15) - 1),
    ("high_watermark", 2 ** 63), ("records", "text"), ("records", 5), ("aborted_transactions", [{"producer_id": "x"}]),
    ("aborted_transactions", 7), ("diverging_epoch", {"epoch": 2 ** 40}), ("_unknown_tags", {1: b"x"}),
    ("_unknown_tags", "junk"), ("current_leader", {"leader_id": 3}), ("preferred_read_replica", 1.5),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_encode_kernel_leaves_the_unusual_to_python(key: str, value: Any) -> None:
    """Wrong values raise the Python encoder's error; tagged fields are written by Python."""
    pure = Message(FETCH.spec, kernel=False)
    parts = [{"partition_index": i, "records": b"r" * 100} for i in range(6)]
    parts[4][key] = value
    msg = {"responses": [{"topic_id": uuid.UUID(int=1), "partitions": parts}]}
    outcomes = []
    for m in (FETCH, pure):
        try:
            outcomes.append(m.encode(msg, 17))
        except Exception as exc:  # noqa: BLE001 - compared below
            outcomes.append(f"{type(exc).__name__}: {exc}")
    assert outcomes[0] == outcomes[1]


# ------------------------------------------------------------------ KeyedList (mapKey)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("n_topics", [1, 7])
def test_map_key_arrays_decode_to_keyed_lists(kernel: bool, n_topics: int) -> None:
    meta = METADATA if kernel else Message(METADATA.spec, kernel=False)
    msg = {
        "brokers": [{"node_id": 10 + i, "host": f"h{i}", "port": 9092} for i in range(5)],
        "topics": [{"name": f"t{t}", "topic_id": uuid.UUID(int=t + 1),
                    "partitions": [{"partition_index": p, "replica_nodes": [p]} for p in range(3)]}
                   for t in range(n_topics)],
    }
    data = meta.encode(msg, 12)
    out = meta.decode(data, 12)
    brokers, topics = out["brokers"], out["topics"]
    assert type(brokers) is KeyedList and brokers.key_fields == ("node_id",)
    assert type(topics) is KeyedList and topics.key_fields == ("name",)
    assert type(topics[0]["partitions"]) is list  # no mapKey there
    assert brokers.find(12)["host"] == "h2" and brokers.find(99) is None and brokers.find(99, "-") == "-"
    assert topics.find(f"t{n_topics - 1}")["topic_id"] == uuid.UUID(int=n_topics)
    assert sorted(brokers.by_key()) == [10, 11, 12, 13, 14]
    # still plain lists for everything else: equality, encoding, printing
    assert brokers == [dict(b) for b in brokers] and repr(brokers).startswith("[{")
    assert meta.encode(out, 12) == data
    assert out == Message(METADATA.spec, kernel=not kernel).decode(data, 12)


def test_nested_map_keys_in_the_kernel() -> None:
    resp = default_schema().response("AddPartitionsToTxn")
    pure = Message(resp.spec, kernel=False)
    msg = {"results_by_topic_v3_and_below": [
        {"name": f"t{t}", "results_by_partition": [{"partition_index": p, "partition_error_code": p % 2}
                                                   for p in range(5)]} for t in range(5)]}
    data = resp.encode(msg, 3)
    for m in (resp, pure):
        topics = m.decode(data, 3)["results_by_topic_v3_and_below"]
        assert type(topics) is KeyedList
        partitions = topics.find("t3")["results_by_partition"]
        assert type(partitions) is KeyedList and partitions.find(3)["partition_error_code"] == 1


def test_map_key_per_version_and_composite_keys() -> None:
    produce = default_schema().request("Produce")
    msg = {"topic_data": [{"name": "a", "topic_id": uuid.UUID(int=1), "partition_data": []}]}
    assert produce.decode(produce.encode(msg, 12), 12)["topic_data"].key_fields == ("name",)
    assert produce.decode(produce.encode(msg, 13), 13)["topic_data"].key_fields == ("topic_id",)
    spec = parse_message("""{"apiKey": 9998, "type": "request", "name": "ConfigsRequest",
      "validVersions": "0", "flexibleVersions": "none", "fields": [
        {"name": "Resources", "type": "[]Resource", "versions": "0+", "fields": [
          {"name": "ResourceType", "type": "int8", "versions": "0+", "mapKey": true},
          {"name": "ResourceName", "type": "string", "versions": "0+", "mapKey": true},
          {"name": "Value", "type": "string", "versions": "0+"}]}]}""")
    configs = Message(spec)
    rows = [{"resource_type": t, "resource_name": n, "value": f"{t}{n}"} for t in (2, 4) for n in "xyz"]
    out = configs.decode(configs.encode({"resources": rows + rows[:1]}, 0), 0)["resources"]
    assert out.key_fields == ("resource_type", "resource_name")
    assert out.find((4, "y"))["value"] == "4y" and out.find((3, "y")) is None
    assert len(out.find_all((2, "x"))) == 2 and len(out.by_key()) == 6
    assert out.key_of(out[1]) == (2, "y")


def test_keyed_list_behaves_as_a_list() -> None:
    items = KeyedList([{"id": 1}, {"id": 2}], ("id",))
    clone = pickle.loads(pickle.dumps(items))
    assert type(clone) is KeyedList and clone.key_fields == ("id",) and clone == items
    assert type(items.copy()) is KeyedList and items.copy().find(2) == {"id": 2}
    assert type(copy.deepcopy(items)) is KeyedList
    items.append({"id": 3})
    assert items.find(3) == {"id": 3} and type(items[1:]) is list
    assert items == [{"id": 1}, {"id": 2}, {"id": 3}]
    with pytest.raises(ValueError, match="at least one key field"):
        KeyedList([{"id": 1}], ())
