"""kbatch schemas ROOT: what a backup's _schemas topic holds."""

from __future__ import annotations

import json

import pytest
from conftest import REAL_LOGS
from support import schemas_topic as st

from kbatch.__main__ import main


def test_lists_subject_versions(tmp_path, capsys):
    st.write_topic(tmp_path, [
        st.noop(),
        st.schema("orders-value", 1, 1, '"string"'),
        st.schema("orders-value", 2, 2, '"long"'),
        st.schema("orders-value", 2, 2, '"long"', deleted=True),
        st.schema("money", 1, 3, '"int"'), st.tombstone("money", 1),
        st.schema("pay", 1, 4, 'syntax = "proto3";', schema_type="PROTOBUF",
                  references=[{"name": "m.proto", "subject": "orders-value", "version": 1}]),
        st.schema("shape", 1, 5, '{"type": "object"}', schema_type="JSON"),
        (b"garbage", b"{}"),
    ])
    assert main(["schemas", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["SUBJECT", "VERSION", "ID", "TYPE", "STATE"]
    assert [line.split()[:5] for line in lines[1:5]] == [
        ["money", "1", "3", "AVRO", "purged"],
        ["orders-value", "1", "1", "AVRO", "live"],
        ["orders-value", "2", "2", "AVRO", "deleted"],
        ["pay", "1", "4", "PROTOBUF", "live"],
    ]
    assert "references m.proto" in lines[4]
    assert lines[5].split()[:5] == ["shape", "1", "5", "JSON", "live"]  # each version's schemaType
    assert lines[6].startswith("4 subjects, 5 versions (3 live), 5 schema ids in _schemas under")
    assert "offset 8: key is not JSON" in err

    assert main(["schemas", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["subjects"] == ["money", "orders-value", "pay", "shape"] and doc["ids"] == [1, 2, 3, 4, 5]
    assert [(v["subject"], v["version"], v["deleted"], v["schemaType"]) for v in doc["versions"]] == [
        ("money", 1, True, "AVRO"), ("orders-value", 1, False, "AVRO"), ("orders-value", 2, True, "AVRO"),
        ("pay", 1, False, "PROTOBUF"), ("shape", 1, False, "JSON")]
    assert doc["records"] == {"NOOP": 1, "SCHEMA": 7}


def test_no_schemas_topic_is_one_line(tmp_path, capsys):
    st.write_topic(tmp_path, [st.noop()], topic="orders")
    assert main(["schemas", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"kbatch schemas: error: no _schemas topic found under {tmp_path} (found: orders); "
                   f"a backup of several brokers needs --recursive\n")
    assert main(["schemas", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.skipif(not (REAL_LOGS / "spooldir" / "_schemas-0").is_dir(), reason="no ../shared/real-logs")
def test_the_real_root(capsys):
    assert main(["schemas", str(REAL_LOGS / "spooldir")]) == 0
    assert capsys.readouterr().out.endswith("(records: 63 NOOP)\n")
