"""kbatch's definitions of Kafka's internal records: they load, compile, and match the definitions
bundled in PyPI packages built from Kafka's own files (kafka-python: the consumer protocol; kio: the
KRaft control records)."""

from __future__ import annotations

import dataclasses
import importlib
import os
import typing
from pathlib import Path

import pytest

from kbatch.internal import DEFINITIONS, default_registry
from kbatch.protocol import Schema, parse_message

SCHEMA = Schema.from_directory(DEFINITIONS)


def _semantic(fields: list[typing.Any]) -> list[dict[str, typing.Any]]:
    return [{
        "name": f.name, "type": f.type, "versions": str(f.versions), "nullable": str(f.nullable),
        "tag": f.tag, "tagged": str(f.tagged) if f.tag is not None else None,
        "default": repr(f.default()), "ignorable": f.ignorable, "map_key": f.map_key,
        "fields": _semantic(f.fields) if f.fields else None,
    } for f in fields]


def test_every_definition_loads_and_compiles_every_version() -> None:
    assert len(SCHEMA) >= 75
    compiled = 0
    for msg in SCHEMA:
        for v in msg.versions:
            msg.decoder(v)
            msg.encoder(v)
            compiled += 1
    assert compiled >= 100


def test_every_file_has_a_kbatch_header_and_no_license_text() -> None:
    for path in sorted(DEFINITIONS.glob("*.json")):
        text = path.read_text()
        assert text.startswith(f"// kbatch's definition of {path.stem}"), path.name
        assert "Licensed to the Apache" not in text
        assert '"about"' not in text


def test_the_registry_covers_every_family() -> None:
    reg = default_registry()
    assert sorted(reg.coordinator["group"]) == list(range(25))
    assert sorted(reg.coordinator["transaction"]) == [0]
    assert sorted(reg.coordinator["share"]) == [0, 1]
    names = {m.name for m in reg.metadata["metadata"].values()}
    for n in ("TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RegisterBrokerRecord",
              "UnregisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
              "FeatureLevelRecord", "ConfigRecord", "ClientQuotaRecord", "ProducerIdsRecord",
              "AccessControlEntryRecord", "RemoveAccessControlEntryRecord", "DelegationTokenRecord",
              "RemoveDelegationTokenRecord", "UserScramCredentialRecord", "RemoveUserScramCredentialRecord",
              "RemoveTopicRecord", "NoOpRecord", "ZkMigrationStateRecord", "RegisterControllerRecord",
              "BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord", "ClearElrRecord"):
        assert n in names, n
    assert len({m.name for m in reg.metadata["remote_log"].values()}) == 4


def test_a_tagged_field_without_versions_exists_in_its_tagged_versions() -> None:
    """Kafka's generator defaults ``versions`` to ``taggedVersions`` (TransactionLogValue uses it)."""
    spec = parse_message('{"type": "data", "name": "X", "validVersions": "0-1", "flexibleVersions": "1+",'
                         ' "fields": [{"name": "A", "type": "int64", "taggedVersions": "1+", "tag": 0,'
                         ' "default": -1}]}')
    assert str(spec.fields[0].versions) == "1+"
    assert str(SCHEMA["TransactionLogValue"].spec.fields[1].versions) == "1+"


def test_an_absent_tagged_array_with_a_null_default_decodes_as_none() -> None:
    """PartitionChangeRecord's Isr/Replicas: absent means "unchanged", not "empty"."""
    msg = SCHEMA["PartitionChangeRecord"]
    decoded = msg.decode(msg.encode({"partition_id": 1, "topic_id": msg.default(0)["topic_id"]}, 0), 0)
    assert decoded["isr"] is None and decoded["replicas"] is None
    decoded = msg.decode(msg.encode({"partition_id": 1, "isr": [1, 2]}, 0), 0)
    assert list(decoded["isr"]) == [1, 2] and decoded["replicas"] is None


kafka_schemas = pytest.importorskip("kafka.protocol.schemas")
KAFKA_PYTHON = Path(os.path.dirname(kafka_schemas.__file__)) / "resources"


@pytest.mark.parametrize("name", ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"])
def test_consumer_protocol_matches_kafka_python_field_for_field(name: str) -> None:
    ours = SCHEMA[name].spec
    theirs = parse_message((KAFKA_PYTHON / f"{name}.json").read_text())
    assert (ours.type, str(ours.valid), str(ours.flexible)) == (theirs.type, str(theirs.valid), str(theirs.flexible))
    assert _semantic(ours.fields) == _semantic(theirs.fields)


KIO = {"LeaderChangeMessage": "leader_change_message", "SnapshotHeaderRecord": "snapshot_header_record",
       "SnapshotFooterRecord": "snapshot_footer_record", "KRaftVersionRecord": "k_raft_version_record",
       "VotersRecord": "voters_record"}


def _kio_fields(cls: type) -> list[tuple[str, typing.Any]]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = f.metadata.get("kafka_type")
        if kind is None:  # a struct or an array of structs: compare its fields
            hint = hints[f.name]
            args = typing.get_args(hint)
            sub = next((a for a in (args or (hint,)) if dataclasses.is_dataclass(a)), None)
            kind = _kio_fields(sub) if sub is not None else repr(hint)
        out.append((f.name, kind))
    return out


def _our_fields(fields: list[typing.Any], version: int) -> list[tuple[str, typing.Any]]:
    out = []
    for f in fields:
        if not f.present(version):
            continue
        kind: typing.Any = _our_fields(f.fields, version) if f.fields else f.kind
        out.append((f.key, kind))
    return out


@pytest.mark.parametrize("name", sorted(KIO))
def test_control_records_match_kio_field_for_field(name: str) -> None:
    pytest.importorskip("kio")
    msg = SCHEMA[name]
    checked = 0
    for v in msg.versions:
        try:
            mod = importlib.import_module(f"kio.schema.{KIO[name]}.v{v}.data")
        except ImportError:
            continue
        cls = getattr(mod, name)
        assert _our_fields(msg.spec.fields, v) == _kio_fields(cls), (name, v)
        checked += 1
    assert checked == len(msg.versions)
