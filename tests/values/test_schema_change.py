"""``kbatch convert --values avro`` into Iceberg and Delta: a later run whose reader schema changes a
field's type (not only adds fields) stops with one line naming the table's schema (Iceberg's schema
id, Delta's version) and this run's reader schema (subject, version, id), the table untouched."""

from __future__ import annotations

import json

import pytest
from support import schemas_topic
from support.avro_root import KEY, V1, V2, grow, write_avro_root
from support.tables import convert_cli, summary_of

pytest.importorskip("fastavro")

#: V1 with ``id`` a double: Avro reads a long writer's id as a double (a promotion), so every record
#: decodes, but the table's ``value.id`` is a long
V1_DOUBLE = {**V1, "fields": [{"name": "id", "type": "double"}, *V1["fields"][1:]]}


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_field_type_change_stops_the_run_naming_both_schemas(tmp_path, kind) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    r, out = write_avro_root(tmp_path / "root"), tmp_path / "out"
    args = [str(r.root), str(out), "--values", "avro", "--format", kind, "--subscribe", "orders", "--mode", "append"]
    first = summary_of(convert_cli(*args, "--reader-schema", "1"))  # V1 (id 1)
    grow(r)
    # a version 3 of orders-value (id 4) registered since: the latest, this run's reader schema
    schemas_topic.write_topic(r.root, [
        schemas_topic.schema("orders-value", 1, 1, json.dumps(V1)),
        schemas_topic.schema("orders-key", 1, 3, json.dumps(KEY)),
        schemas_topic.schema("orders-value", 2, 2, json.dumps(V2)),
        schemas_topic.schema("orders-value", 3, 4, json.dumps(V1_DOUBLE)),
    ])
    run = convert_cli(*args)
    assert run.returncode == 1, run.stderr
    err = run.stderr.strip().splitlines()[-1]
    assert err.startswith("kbatch convert: error: table ") and "value.id" in err and "double" in err, err
    assert ("table's schema 0" if kind == "iceberg" else "(version 0)") in err, err  # the table's schema
    assert "this run's values were decoded with orders-value version 3 (schema id 4)" in err, err  # and this run's
    again = summary_of(convert_cli(*args, "--reader-schema", "1"))  # the table untouched: the same records again
    assert again["records"] == 7 and first["records"] == 43
