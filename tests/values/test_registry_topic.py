"""Registry.from_log_dirs: the registry's _schemas topic replayed by the registry's rules."""

from __future__ import annotations

import json
import pickle
import uuid

import pytest
from conftest import REAL_LOGS
from support import schemas_topic as st

from kbatch.values import Registry, RegistryError, Schema, SchemaNotFoundError, guid_of

AVRO_V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]})
AVRO_V3 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]})
MONEY = json.dumps({"type": "record", "name": "Money", "namespace": "shop", "fields": [
    {"name": "cents", "type": "long"}]})
PAYMENT = json.dumps({"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "amount", "type": "shop.Money"}]})


def registry_of(tmp_path, records):
    st.write_topic(tmp_path, records)
    return Registry.from_log_dirs(tmp_path)


def test_versions_ids_and_latest(tmp_path):
    reg = registry_of(tmp_path, [
        st.noop(), st.config(None, "BACKWARD"),
        st.schema("orders-value", 1, 1, AVRO_V1),
        st.schema("orders-value", 2, 2, AVRO_V2),
        st.schema("keys", 1, 3, '"string"', schema_type="AVRO"),
        st.schema("proto-value", 1, 4, 'syntax = "proto3"; message M { int64 a = 1; }', schema_type="PROTOBUF"),
        st.mode(None, "READWRITE"), st.noop(),
    ])
    assert reg.subjects() == ["keys", "orders-value", "proto-value"]
    assert reg.versions("orders-value") == [1, 2]
    latest = reg.latest("orders-value")
    assert (latest.id, latest.version, latest.text, latest.schema_type) == (2, 2, AVRO_V2, "AVRO")
    assert reg.schema(1) == Schema(AVRO_V1, "AVRO", 1, "orders-value", 1, (), (), False, ".", guid_of(AVRO_V1))
    assert reg.schema(4).schema_type == "PROTOBUF"
    assert reg.keytypes == {"NOOP": 2, "CONFIG": 1, "SCHEMA": 4, "MODE": 1}
    assert reg.notes == []
    with pytest.raises(SchemaNotFoundError, match="no schema with id 99"):
        reg.schema(99)


def test_soft_delete_keeps_the_id_and_drops_the_version(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("orders-value", 1, 1, AVRO_V1),
        st.schema("orders-value", 2, 2, AVRO_V2),
        st.schema("orders-value", 2, 2, AVRO_V2, deleted=True),  # soft delete rewrites the record
    ])
    assert reg.versions("orders-value") == [1]
    assert reg.versions("orders-value", deleted=True) == [1, 2]
    assert reg.latest("orders-value").id == 1  # the highest live version
    assert reg.schema(2).text == AVRO_V2  # old data written with it still decodes
    assert reg.schema(2).deleted
    with pytest.raises(SchemaNotFoundError):
        reg.version("orders-value", 2)
    assert reg.version("orders-value", 2, deleted=True).id == 2


def test_tombstone_is_a_permanent_delete_but_the_id_stays(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("orders-value", 1, 1, AVRO_V1),
        st.schema("orders-value", 2, 2, AVRO_V2),
        st.schema("orders-value", 2, 2, AVRO_V2, deleted=True),
        st.tombstone("orders-value", 2),
    ])
    assert reg.versions("orders-value", deleted=True) == [1]
    with pytest.raises(SchemaNotFoundError):
        reg.version("orders-value", 2, deleted=True)
    assert reg.schema(2).text == AVRO_V2
    states = {(s.subject, s.version): state for s, state, _ in reg.listing()}
    assert states == {("orders-value", 1): "live", ("orders-value", 2): "hard"}


def test_delete_subject_soft_deletes_up_to_its_version(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("orders-value", 1, 1, AVRO_V1),
        st.schema("orders-value", 2, 2, AVRO_V2),
        st.delete_subject("orders-value", 1),
    ])
    assert reg.versions("orders-value") == [2]
    assert reg.schema(1).deleted and not reg.schema(2).deleted
    st.write_topic(tmp_path / "b", [
        st.schema("orders-value", 1, 1, AVRO_V1), st.schema("orders-value", 2, 2, AVRO_V2),
        st.delete_subject("orders-value", 2), st.schema("other", 1, 5, '"int"'),
    ])
    reg = Registry.from_log_dirs(tmp_path / "b")
    assert reg.subjects() == ["other"]
    assert reg.subjects(deleted=True) == ["orders-value", "other"]
    with pytest.raises(SchemaNotFoundError, match="no live version"):
        reg.latest("orders-value")
    assert reg.schema(1).text == AVRO_V1 and reg.schema(2).text == AVRO_V2


def test_clear_subject_purges_soft_deleted_versions_only(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("a", 1, 1, AVRO_V1), st.schema("a", 2, 2, AVRO_V2),
        st.delete_subject("a", 1), st.clear_subject("a"),
        st.schema(":.eu:b", 1, 1, AVRO_V3), st.schema(":.eu:b", 1, 1, AVRO_V3, deleted=True),
        st.schema(":.eu:c", 1, 2, AVRO_V1, deleted=True), st.clear_subject(":.eu:"),
    ])
    states = {(s.subject, s.version): state for s, state, _ in reg.listing()}
    assert states == {("a", 1): "hard", ("a", 2): "live", (":.eu:b", 1): "hard", (":.eu:c", 1): "hard"}
    assert reg.schema(1).text == AVRO_V1


def test_the_first_schema_of_an_id_wins(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("a", 1, 7, AVRO_V1),
        st.schema("b", 1, 7, AVRO_V2),  # another text for a taken id: the registry ignores it
        st.schema("c", 1, 7, AVRO_V1),  # the same schema under another subject shares the id
    ])
    assert reg.schema(7).text == AVRO_V1
    assert reg.subjects() == ["a", "c"]
    assert len(reg.notes) == 1 and "offset 1" in reg.notes[0] and "id 7" in reg.notes[0]


def test_ids_are_per_context(tmp_path):
    reg = registry_of(tmp_path, [
        st.context(".eu"),
        st.schema("orders-value", 1, 1, AVRO_V1),
        st.schema(":.eu:orders-value", 1, 1, AVRO_V3),  # id 1 again, in context .eu: no clash
        st.schema(":.eu:only-eu", 1, 2, AVRO_V2),
    ])
    assert reg.notes == []
    assert reg.schema(1).text == AVRO_V1
    assert reg.schema(1, subject=":.eu:").text == AVRO_V3
    eu = reg.schema(1, subject=":.eu:orders-value")
    assert (eu.text, eu.context, eu.subject) == (AVRO_V3, ".eu", ":.eu:orders-value")
    with pytest.raises(SchemaNotFoundError):
        reg.schema(2)  # not in the default context
    # an unqualified subject that does not hold the id in the default context is looked for in the others
    assert reg.schema(2, subject="only-eu").text == AVRO_V2
    assert reg.latest(":.eu:orders-value").text == AVRO_V3


def test_references_are_resolved_dependencies_first(tmp_path):
    envelope = json.dumps({"type": "record", "name": "Envelope", "namespace": "shop", "fields": [
        {"name": "payment", "type": "shop.Payment"}, {"name": "fee", "type": "shop.Money"}]})
    reg = registry_of(tmp_path, [
        st.schema("money", 1, 1, MONEY),
        st.schema("payment", 1, 2, PAYMENT, references=[{"name": "shop.Money", "subject": "money", "version": 1}]),
        st.schema("envelope", 1, 3, envelope, references=[
            {"name": "shop.Payment", "subject": "payment", "version": -1},  # -1: the latest
            {"name": "shop.Money", "subject": "money", "version": 1}]),
    ])
    env = reg.schema(3)
    assert [r.name for r in env.references] == ["shop.Payment", "shop.Money"]
    assert [(name, dep.id) for name, dep in env.dependencies] == [("shop.Money", 1), ("shop.Payment", 2)]
    assert reg.schema(2).dependencies[0][1].text == MONEY
    assert reg.schema(1).dependencies == ()


def test_a_reference_to_a_missing_subject_names_it(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema("payment", 1, 2, PAYMENT, references=[{"name": "shop.Money", "subject": "money", "version": 1}]),
    ])
    with pytest.raises(SchemaNotFoundError, match=r"reference 'shop\.Money' of schema 2: subject 'money'"):
        reg.schema(2)


def test_references_in_a_context_resolve_in_that_context(tmp_path):
    reg = registry_of(tmp_path, [
        st.schema(":.eu:money", 1, 1, MONEY),
        st.schema(":.eu:payment", 1, 2, PAYMENT, references=[{"name": "shop.Money", "subject": "money", "version": 1}]),
    ])
    assert reg.schema(2, subject=":.eu:").dependencies[0][1].subject == ":.eu:money"


def test_guids_from_the_text_or_the_stored_md5(tmp_path):
    stored = uuid.uuid4()
    import base64
    reg = registry_of(tmp_path, [
        st.schema("a", 1, 1, AVRO_V1),
        st.schema("b", 1, 2, AVRO_V2, md5=base64.b64encode(stored.bytes).decode()),
    ])
    assert reg.schema_by_guid(guid_of(AVRO_V1)).id == 1
    assert reg.schema_by_guid(str(stored)).id == 2
    with pytest.raises(SchemaNotFoundError, match="GUID"):
        reg.schema_by_guid(uuid.uuid4())


def test_records_that_are_not_the_registrys_are_noted_and_skipped(tmp_path):
    reg = registry_of(tmp_path, [
        (b"not json", b"{}"),
        (b'{"subject": "x"}', b"{}"),
        (b'{"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 7}', b"{}"),
        (b'{"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}', b"[1]"),
        (b'{"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}', b'{"id": 1}'),
        st.schema("ok", 1, 1, AVRO_V1),
    ])
    assert reg.subjects() == ["ok"]
    assert [n.split(":")[0] for n in reg.notes] == [f"offset {i}" for i in range(5)]


def test_no_schemas_topic_is_one_clear_error(tmp_path):
    st.write_topic(tmp_path, [st.noop()], topic="orders")
    with pytest.raises(RegistryError, match=r"no _schemas topic found under .* \(found: orders\)"):
        Registry.from_log_dirs(tmp_path)


def test_a_backup_of_several_brokers_and_the_partition_directory_itself(tmp_path):
    part = st.write_topic(tmp_path / "broker-1" / "kafka-logs", [st.schema("a", 1, 1, AVRO_V1)])
    assert Registry.from_log_dirs(tmp_path, recursive=True).schema(1).text == AVRO_V1
    assert Registry.from_log_dirs(part).schema(1).text == AVRO_V1
    st.write_topic(tmp_path / "other", [st.schema("a", 1, 1, AVRO_V2)], topic="_my_schemas")
    assert Registry.from_log_dirs(tmp_path / "other", topic="_my_schemas").schema(1).text == AVRO_V2


def test_a_replayed_registry_pickles(tmp_path):
    reg = registry_of(tmp_path, [st.schema("a", 1, 1, AVRO_V1)])
    copy = pickle.loads(pickle.dumps(reg))
    assert copy.schema(1) == reg.schema(1)
    assert copy.latest("a").text == AVRO_V1


@pytest.mark.skipif(not (REAL_LOGS / "spooldir" / "_schemas-0").is_dir(), reason="no ../shared/real-logs")
def test_the_real_schemas_topic_loads():
    # Confluent 5.1's _schemas of kafka-connect-spooldir's test setup: the registry's NOOP
    # records only (it wrote no schema), all of them read and none noted as strange
    reg = Registry.from_log_dirs(REAL_LOGS / "spooldir")
    assert reg.keytypes == {"NOOP": 63}
    assert reg.notes == [] and reg.subjects() == [] and reg.listing() == []


def test_records_nested_too_deeply_are_noted_and_skipped(tmp_path):
    # issue 34 item 5: json.loads raised RecursionError out of the replay
    deep = b"[" * 100_000 + b"]" * 100_000
    reg = registry_of(tmp_path, [
        (deep, b"{}"),
        (b'{"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}', b'{"a": ' + deep + b"}"),
        st.schema("ok", 1, 1, AVRO_V1),
    ])
    assert reg.subjects() == ["ok"]
    assert reg.notes == ["offset 0: key is not JSON (nested too deeply to read), record skipped",
                         "offset 1: SCHEMA value is not JSON (nested too deeply to read), record skipped"]


def test_a_lone_surrogate_in_a_schema_text(tmp_path):
    # issue 34 item 5: a schema text holding "\ud800" (valid JSON in the _schemas record) raised
    # UnicodeEncodeError from its GUID; Java's getBytes(UTF_8) writes it "?", and a compiler
    # that cannot take it says so as its schema error
    from kbatch.values import JsonSchemaError, ProtobufSchemaError, compile_proto, json_schema_type

    lone = "\ud800"
    avro = AVRO_V1.replace('"Order"', f'"Order", "doc": "{lone}"')
    proto = f'syntax = "proto3"; message M {{ string a = 1; }} // {lone}'
    js = json.dumps({"type": "object", "properties": {lone: {"type": "string"}}}, ensure_ascii=False)
    reg = registry_of(tmp_path, [st.schema("a", 1, 1, avro), st.schema("p", 1, 2, proto, schema_type="PROTOBUF"),
                                 st.schema("j", 1, 3, js, schema_type="JSON")])
    assert reg.notes == [] and reg.subjects() == ["a", "j", "p"]
    text = reg.schema(2).text
    assert "\ud800" in text and reg.schema_by_guid(guid_of(text.replace("\ud800", "?"))).id == 2
    with pytest.raises(ProtobufSchemaError, match="schema 2 is not valid Unicode: a lone surrogate at character"):
        compile_proto(reg.schema(2))
    with pytest.raises(JsonSchemaError, match=r"a property name that is not valid Unicode .* at #/properties/\\ud800"):
        json_schema_type(reg.schema(3))
