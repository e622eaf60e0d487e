"""Every record type of every internal topic, with random values: encode, write with LogWriter,
read back with open_log, decode with decode_key_value — the same message comes out."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import protocol_strategies as strategies

import kbatch
from kbatch.internal import (
    InternalRecordError,
    decode_key_value,
    default_registry,
    encode_key_value,
    iter_decoded,
)

REG = default_registry()


def normal(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    return value


# (family, key schema or None, value schema, value version)
CASES: list[tuple[str, str | None, str, int]] = []
for fam in ("group", "transaction", "share"):
    for _rtype, (kmsg, _kv, vmsg) in sorted(REG.coordinator[fam].items()):
        CASES += [(fam, kmsg.name, vmsg.name, v) for v in vmsg.versions]
for fam in ("metadata", "remote_log"):
    for msg in REG.metadata[fam].values():
        CASES += [(fam, None, msg.name, v) for v in msg.versions]


def test_every_record_type_is_covered() -> None:
    assert len({c[2] for c in CASES}) == 48  # 17 group, 1 transaction, 2 share, 25 metadata, 4 remote-log
    assert len(CASES) == 71  # every value version of each


@pytest.mark.parametrize("case", CASES, ids=[f"{c[2]}-v{c[3]}-{c[1]}" for c in CASES])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tombstone=st.booleans())
def test_round_trip_through_logwriter(data: st.DataObject, tombstone: bool,
                                      case: tuple[str, str | None, str, int]) -> None:
    fam, key_name, value_name, version = case
    vmsg = REG.schema[value_name]
    value = data.draw(strategies.struct(vmsg.spec.fields, version))
    key = None
    if key_name is not None:
        kmsg = REG.schema[key_name]
        key = data.draw(strategies.struct(kmsg.spec.fields, 0))
    tomb = tombstone and key_name is not None
    k, v = encode_key_value(fam, key_name or value_name, key, None if tomb else value, version=version)
    with tempfile.TemporaryDirectory() as root:
        with kbatch.LogWriter(root, "t", 0) as w:
            w.append(kbatch.encode([v], keys=[k]))
        table = kbatch.open_log(f"{root}/t-0").read()
        [entry] = list(iter_decoded(table, fam))
    r = entry.record
    assert r.value_type == vmsg.name
    if key_name is not None:
        assert r.key_type == key_name
        assert normal(r.key) == normal(key)
    if tomb:
        assert r.value is None
    else:
        assert r.value_version == version
        assert normal(r.value) == normal(value)


def test_unknown_type_raises_naming_the_offset_or_keeps_the_bytes() -> None:
    key = b"\x00\x63" + b"junk"
    with pytest.raises(InternalRecordError, match=r"unknown group coordinator record type 99.*offset 12"):
        decode_key_value("group", key, b"\x00\x00", offset=12)
    r = decode_key_value("group", key, b"\x00\x00", offset=12, on_unknown="raw")
    assert r.unknown and r.raw_key == key and r.raw_value == b"\x00\x00" and r.key is None


def test_unknown_value_version_and_metadata_type() -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 0},
                            {"offset": 1, "metadata": "", "commit_timestamp": 0}, version=3)
    assert v is not None
    with pytest.raises(InternalRecordError, match=r"unknown OffsetCommitValue version 9 .*offset 3"):
        decode_key_value("group", k, b"\x00\x09" + v[2:], offset=3)
    with pytest.raises(InternalRecordError, match=r"unknown metadata record type 99"):
        decode_key_value("metadata", None, b"\x01\x63\x00\x00")
    assert decode_key_value("metadata", None, b"\x01\x63\x00\x00", on_unknown="raw").unknown
    with pytest.raises(InternalRecordError, match="frame version 0"):
        decode_key_value("metadata", None, b"\x00\x03\x00")


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_truncated_bytes_are_a_clear_error_never_a_crash(cut: int) -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "group", "topic": "topic", "partition": 0},
                            {"offset": 1, "leader_epoch": 2, "metadata": "meta", "commit_timestamp": 0}, version=3)
    assert k is not None and v is not None
    with pytest.raises(InternalRecordError, match="offset 5"):
        decode_key_value("group", k[:-cut], v, offset=5)
    with pytest.raises(InternalRecordError, match="offset 5"):
        decode_key_value("group", k, v[:-cut], offset=5)
    with pytest.raises(InternalRecordError, match="left over"):
        decode_key_value("group", k, v + b"x" * cut, offset=5)


def test_control_records_decode_with_type_names() -> None:
    schema = REG.schema
    body = schema["LeaderChangeMessage"].encode({"version": 0, "leader_id": 1, "voters": [{"voter_id": 1}],
                                                 "granting_voters": [{"voter_id": 1}]}, 0)
    r = decode_key_value("metadata", b"\x00\x00\x00\x02", b"\x00\x00" + body, control=True)
    assert r.value_type == "LeaderChangeMessage" and r.value is not None and r.value["leader_id"] == 1
    r = decode_key_value("group", b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07", control=True)
    assert r.value_type == "EndTxnMarker" and r.record_type == 1 and r.value == {"coordinator_epoch": 7}
