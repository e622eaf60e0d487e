"""Registry({id: text}) and Registry.from_directory: schemas without a registry."""

from __future__ import annotations

import json
import pickle

import pytest

from kbatch.values import Registry, RegistryError, Schema, SchemaNotFoundError, SchemaReference

MONEY = json.dumps({"type": "record", "name": "Money", "namespace": "shop", "fields": [
    {"name": "cents", "type": "long"}]})
PAYMENT = json.dumps({"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "amount", "type": "shop.Money"}]})


def test_a_dict_of_ids():
    reg = Registry({1: '"string"', 2: Schema("syntax = 'proto3';", "PROTOBUF")})
    assert reg.schema(1) == Schema('"string"', "AVRO", 1, guid=reg.schema(1).guid)
    assert reg.schema(2).schema_type == "PROTOBUF" and reg.schema(2).id == 2
    assert reg.is_local and reg.subjects() == []
    with pytest.raises(SchemaNotFoundError):
        reg.schema(3)
    assert pickle.loads(pickle.dumps(reg)).schema(1).text == '"string"'
    with pytest.raises(TypeError, match="integers"):
        Registry({"1": "x"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unknown schema type"):
        Schema("x", "XML")


def test_a_directory(tmp_path):
    (tmp_path / "1.avsc").write_text(MONEY)
    (tmp_path / "5.proto").write_text('syntax = "proto3"; message M {}')
    (tmp_path / "6.json").write_text('{"type": "object"}')
    (tmp_path / "README.md").write_text("not a schema")
    (tmp_path / "money").mkdir()
    (tmp_path / "money" / "1.avsc").write_text(MONEY)  # the same text as 1.avsc: id 1
    (tmp_path / ":.eu:orders").mkdir()
    (tmp_path / ":.eu:orders" / "3.avsc").write_text('"long"')  # no id file: known by subject only
    answers = [{"subject": "payment", "version": 1, "id": 2, "schema": PAYMENT,
                "references": [{"name": "shop.Money", "subject": "money", "version": 1}]},
               {"id": 9, "schema": '"int"'}]
    (tmp_path / "export.jsonl").write_text("\n".join(json.dumps(a) for a in answers) + "\n")
    reg = Registry.from_directory(tmp_path)
    assert reg.schema(1).text == MONEY and reg.schema(1).subject == "money"
    assert reg.schema(5).schema_type == "PROTOBUF" and reg.schema(6).schema_type == "JSON"
    assert reg.schema(9).text == '"int"'
    payment = reg.schema(2)
    assert payment.references == (SchemaReference("shop.Money", "money", 1),)
    assert [(n, d.text) for n, d in payment.dependencies] == [("shop.Money", MONEY)]
    assert reg.latest(":.eu:orders").text == '"long"' and reg.latest(":.eu:orders").id is None
    assert reg.subjects() == [":.eu:orders", "money", "payment"]


def test_a_directory_with_conflicts_or_nothing(tmp_path):
    (tmp_path / "1.avsc").write_text('"string"')
    (tmp_path / "x.jsonl").write_text(json.dumps({"id": 1, "schema": '"int"'}))
    with pytest.raises(RegistryError, match="id 1 is given twice"):
        Registry.from_directory(tmp_path)
    (tmp_path / "x.jsonl").write_text("{not json")
    with pytest.raises(RegistryError, match=r"not a schema registry answer.*x.jsonl:1"):
        Registry.from_directory(tmp_path)
    with pytest.raises(FileNotFoundError):
        Registry.from_directory(tmp_path / "missing")
