"""Typed values in Spark: ``kbatch.spark.decode_values`` and the ``kafka-log`` source's
``valueFormat=avro``, on local Spark, against fastavro's reading of the same Confluent-framed
records (two writer versions interleaved; bad values raising or null); the registry shipped to
the executors once."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers

pytest.importorskip("pyspark")
pytest.importorskip("fastavro")
pa = pytest.importorskip("pyarrow")

from support.registry_server import RegistryServer  # noqa: E402
from support.typed_root import KEY, KEY_ID, V1, V1_ID, V2, V2_ID, read_avro, write_typed_root  # noqa: E402

import kbatch.spark  # noqa: E402
from kbatch.values import AvroSchemaError, Registry  # noqa: E402


@pytest.fixture(scope="module")
def typed(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("typed")
    return root, write_typed_root(root)


def _expected_orders(made: dict) -> list[tuple]:
    """(partition, offset, key, value, writer id) as fastavro reads them, V2 the reader."""
    out = []
    for (topic, partition), rows in made["records"].items():
        if topic != "orders":
            continue
        for offset, key, value in rows:
            out.append((partition, offset, read_avro(key, made["writers"], KEY),
                        read_avro(value, made["writers"], V2), V1_ID if offset % 2 else V2_ID))
    return sorted(out, key=lambda r: (r[0], r[1]))


def _plain(obj):
    """A collected Spark value as fastavro gives it: dicts, and timestamps in UTC (PySpark gives
    naive local times)."""
    if hasattr(obj, "asDict"):
        obj = obj.asDict(recursive=True)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, datetime.datetime) and obj.tzinfo is None:
        return obj.astimezone(datetime.timezone.utc)
    return obj


def _collect(df, columns: list[str]) -> list[dict]:
    """The rows (PySpark's ``toArrow`` cannot cast a null struct with non-null fields), by offset."""
    rows = [_plain(r) for r in df.select(*columns).collect()]
    return sorted(rows, key=lambda r: (r.get("partition", 0), r["offset"]))


def _rows(df, key: str = "key") -> list[tuple]:
    rows = _collect(df, ["partition", "offset", key, "value", "value_schema_id"])
    return [(r["partition"], r["offset"], r[key], r["value"], r["value_schema_id"]) for r in rows]


def test_decode_values_and_value_format_equal_fastavro(spark, typed):
    root, made = typed
    reg = Registry.from_log_dirs(root)
    df = spark.read.format("kafka-log").option("subscribe", "orders").load(str(root))
    out = kbatch.spark.decode_values(df, reg, topic="orders")  # reader: orders-value's latest (V2)
    out = kbatch.spark.decode_values(out, reg, column="key", reader_schema=KEY_ID)
    assert out.columns[:4] == ["key", "key_schema_id", "value", "value_schema_id"]
    assert out.schema["value"].dataType.simpleString().startswith(
        "struct<id:bigint,status:string,amount:decimal(9,2),at:timestamp,tags:array<string>,note:string,"
        "channel:string,ship:struct<city:string,zip:int>>")
    want = _expected_orders(made)
    assert len(want) == 80
    assert _rows(out) == want
    # the data source decodes in its reader, laid out by the same reader schema (the topic's latest)
    src = (spark.read.format("kafka-log").option("subscribe", "orders").option("valueFormat", "avro")
           .option("keyFormat", "avro").option("keyReaderSchema", json.dumps(KEY)).load(str(root)))
    assert src.schema == out.schema
    assert _rows(src) == want
    # a reader schema named by id lays the same records out by V1 (V2's fields dropped)
    v1 = (spark.read.format("kafka-log").option("subscribe", "orders").option("valueFormat", "avro")
          .option("readerSchema", str(V1_ID)).load(str(root)))
    got = [(r["partition"], r["offset"], r["value"]) for r in _collect(v1, ["partition", "offset", "value"])]
    assert got == [(p, o, read_avro(made["records"][("orders", p)][o][2], made["writers"], V1))
                   for p in (0, 1) for o in range(40)]


def test_bad_values_raise_or_are_null_with_their_error(spark, typed):
    root, made = typed
    reg = Registry.from_log_dirs(root)
    df = spark.read.format("kafka-log").option("subscribe", "mixed").load(str(root))
    nulled = kbatch.spark.decode_values(df, reg, errors="null", topic="mixed")
    src = (spark.read.format("kafka-log").option("subscribe", "mixed").option("valueFormat", "avro")
           .option("valueErrors", "null").load(str(root)))
    # the streaming reader decodes alike
    query = (spark.readStream.format("kafka-log").option("subscribe", "mixed").option("valueFormat", "avro")
             .option("valueErrors", "null").option("startingOffsets", "earliest").load(str(root))
             .writeStream.format("memory").queryName("typed_stream").trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    streamed = spark.table("typed_stream")
    assert streamed.schema == src.schema
    for frame in (nulled, src, streamed):
        rows = _collect(frame, ["offset", "value", "value_schema_id", "value_error"])
        values = [r["value"] for r in rows]
        raw = [v for _, _, v in made["records"][("mixed", 0)]]
        assert values == [read_avro(raw[0], made["writers"], V2), None, None, None, None,
                          read_avro(raw[5], made["writers"], V2)]
        errors = [r["value_error"] for r in rows]
        assert errors[0] is None and errors[4] is None and errors[5] is None  # a tombstone is no error
        assert errors[1].startswith("truncated value") and "offset 1" in errors[1]
        assert errors[2].startswith("unknown schema id 99")
        assert errors[3].startswith("no schema registry frame: magic byte 0x7b")
        assert [r["value_schema_id"] for r in rows] == [V2_ID, V2_ID, 99, None, None, V2_ID]
    with pytest.raises(Exception, match="truncated value") as info:  # the task fails: kbatch's error
        kbatch.spark.decode_values(df, reg, topic="mixed").collect()
    assert "offset 1" in str(info.value)
    with pytest.raises(Exception, match="truncated value"):
        spark.read.format("kafka-log").option("subscribe", "mixed").option("valueFormat", "avro").load(
            str(root)).collect()


def test_the_reader_schema_is_named_or_the_topic_is_one(spark, typed):
    root, _ = typed
    reg = Registry.from_log_dirs(root)
    df = spark.read.format("kafka-log").option("subscribe", "orders").load(str(root))
    with pytest.raises(AvroSchemaError, match="name a reader schema"):
        kbatch.spark.decode_values(df, reg)
    with pytest.raises(ValueError, match="mapping='spark'"):
        kbatch.spark.decode_values(df, reg, topic="orders", mapping="arrow")
    # a recursive reader schema: refused, or cut at from_avro's recursiveFieldMaxDepth (plan time only)
    node = json.dumps({"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}]})
    with pytest.raises(AvroSchemaError, match="recursive"):
        kbatch.spark.decode_values(df, reg, reader_schema=node)
    cut = kbatch.spark.decode_values(df, reg, reader_schema=node, max_depth=2)
    assert cut.schema["value"].dataType.simpleString() == "struct<v:bigint,next:struct<v:bigint>>"
    src = (spark.read.format("kafka-log").option("subscribe", "orders").option("valueFormat", "avro")
           .option("readerSchema", node).option("recursiveFieldMaxDepth", "2").load(str(root)))
    assert src.schema["value"] == cut.schema["value"]
    with pytest.raises(Exception, match="read one topic"):  # two topics, no readerSchema
        spark.read.format("kafka-log").option("subscribe", "orders,mixed").option("valueFormat", "avro").load(
            str(root))
    with pytest.raises(Exception, match="valueFormat must be binary or avro or json or protobuf"):
        spark.read.format("kafka-log").option("valueFormat", "xml").load(str(root))


def test_the_registry_goes_to_the_executors_once(spark, typed):
    root, _ = typed
    with RegistryServer() as server:
        server.state.register("orders-value", json.dumps(V1), schema_id=V1_ID)
        server.state.register("orders-value", json.dumps(V2), schema_id=V2_ID)
        reg = Registry(server.url, backoff=0)
        df = (spark.read.format("kafka-log").option("subscribe", "orders").option("minPartitions", "2")
              .option("maxRecordsPerBatch", "4").load(str(root)))
        tasks = df.rdd.getNumPartitions()
        assert tasks == 2
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "4")  # 20 Arrow batches decoded
        try:
            rows = kbatch.spark.decode_values(df, reg, topic="orders").select("value_schema_id").collect()
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        assert sorted({r.value_schema_id for r in rows}) == [V1_ID, V2_ID] and len(rows) == 80
        # the driver asked for the latest version once; each writer id at most once per task
        # (once per executor process: the registry's cache), never per batch
        assert server.state.requests["/subjects/orders-value/versions/latest"] == 1
        for i in (V1_ID, V2_ID):
            assert 1 <= server.state.requests[f"/schemas/ids/{i}"] <= tasks
        server.state.requests.clear()
        src = (spark.read.format("kafka-log").option("subscribe", "orders").option("minPartitions", "2")
               .option("maxRecordsPerBatch", "4").option("valueFormat", "avro")
               .option("schemaRegistry.url", server.url).load(str(root)))
        assert len(src.select("value").collect()) == 80
        for i in (V1_ID, V2_ID):
            assert server.state.requests[f"/schemas/ids/{i}"] <= tasks


def test_split_frame_writes_the_dead_letters_values_split_gives(spark, typed, tmp_path):
    """The Spark engine's split: the executors decode, keep the good rows and write the rest as
    Parquet under ``topic=<t>/``; both equal :func:`kbatch.values.split` of the same records."""
    import pyarrow.dataset as pads

    from kbatch.log import open_log
    from kbatch.spark._dead_letters import split_frame
    from kbatch.values import reader_schema, split

    root, _ = typed
    reg = Registry.from_log_dirs(root)
    reader = reader_schema(reg, subject="mixed-value")
    df = spark.read.format("kafka-log").option("subscribe", "mixed").load(str(root))
    dead_dir = tmp_path / "_dead_letter"
    good = split_frame(df, reg, str(dead_dir), values=reader, name="t")
    got = _collect(good, ["offset", "value", "value_schema_id"])
    raw = open_log(root / "mixed-0").to_arrow()
    want_good, want_dead = split(raw, reg, values=reader)
    assert [(r["offset"], r["value"], r["value_schema_id"]) for r in got] == \
        [(r["offset"], _plain(r["value"]), r["value_schema_id"]) for r in want_good.to_pylist()]
    assert sorted(p.name for p in dead_dir.iterdir()) == ["topic=mixed"]
    dead = pads.dataset(dead_dir, format="parquet", partitioning="hive").to_table()
    assert dead.num_rows == 3
    keep = ["offset", "value", "schema_id", "error", "reason", "path", "byte", "column"]
    assert sorted(dead.select(keep).to_pylist(), key=lambda r: r["offset"]) == want_dead.select(keep).to_pylist()
    with pytest.raises(Exception, match="truncated value"):
        split_frame(df, reg, str(tmp_path / "never"), values=reader, fail=True).collect()
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------- kbatch convert --engine spark --values avro


def _convert_run(capsys, *argv: str) -> tuple[int, dict | str]:
    """``kbatch convert`` in this process (the module's session is Spark's): status and summary
    (or the error line)."""
    import argparse

    from kbatch.convert._arguments import add_arguments
    from kbatch.convert._run import run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    status = run(parser.parse_args([*argv, "--json-summary"]))
    captured = capsys.readouterr()
    if status:
        return status, captured.err.strip()
    return status, json.loads(captured.out.strip().splitlines()[-1])


def _folder(path: Path, columns: list[str] | None = None) -> list[dict]:
    import pyarrow.dataset as pads

    topic = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
    table = pads.dataset(str(path), format="parquet", partitioning=topic).to_table(columns=columns)
    return sorted(table.to_pylist(), key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_convert_with_spark_values_equals_the_arrow_engine(spark, tmp_path, capsys):
    from support.avro_root import grow, write_avro_root

    r = write_avro_root(tmp_path / "root")
    runs = {}
    for engine in ("arrow", "spark"):
        out = tmp_path / engine
        status, summary = _convert_run(capsys, str(r.root), str(out), "--engine", engine, "--values", "avro",
                                       "--keys", "avro", *(["--master", "local[2]"] if engine == "spark" else []))
        assert status == 0, summary
        runs[engine] = (out, summary)
    (a, sa), (s, ss) = runs["arrow"], runs["spark"]
    assert ss["engine"] == "spark" and ss["dead_letters"] == sa["dead_letters"] == 3
    assert ss["dead_letter_path"] == str(s / "_dead_letter")
    assert ss["value_errors"] == sa["value_errors"]
    assert ss["records"] == sa["records"] and ss["notes"][:3] == sa["notes"][:3]
    per = {e: sorted((p["topic"], p["partition"], p["records"], p["dead_letters"], p["why"])
                     for p in runs[e][1]["per_partition"]) for e in runs}
    assert per["spark"] == per["arrow"]
    # the typed rows: the same values (fastavro's reading), ids, keys and Kafka columns
    import pyarrow.parquet as pq

    columns = ["key", "key_schema_id", "value", "value_schema_id", "partition", "offset", "timestamp"]
    orders = sorted(pq.read_table(s / "topic=orders", columns=columns).to_pylist(), key=lambda row: row["offset"])
    assert orders == sorted(pq.read_table(a / "topic=orders", columns=columns).to_pylist(),
                            key=lambda row: row["offset"])
    assert {row["offset"]: row["value"] for row in orders} == r.good
    plain = pq.read_table(s / "topic=plain")  # a topic without a subject stays binary
    assert plain.schema.field("value").type == pa.binary() and "value_schema_id" not in plain.schema.names
    # Spark reads both outputs with the same schema: from_avro's types
    assert spark.read.parquet(str(s / "topic=orders")).schema == spark.read.parquet(str(a / "topic=orders")).schema
    # the dead letters: the same raw records and errors, in the same layout
    assert sorted(p.name for p in (s / "_dead_letter").iterdir()) == ["topic=orders"]
    assert _folder(s / "_dead_letter") == _folder(a / "_dead_letter")
    assert sorted(row["offset"] for row in _folder(s / "_dead_letter")) == sorted(r.bad)
    # --flatten-values: the struct's fields as value_<field> columns, as the arrow engine writes them
    for engine in ("arrow", "spark"):
        status, summary = _convert_run(capsys, str(r.root), str(tmp_path / f"flat-{engine}"), "--engine", engine,
                                       "--values", "avro", "--flatten-values", "--subscribe", "orders",
                                       *(["--master", "local[2]"] if engine == "spark" else []))
        assert status == 0, summary
    flat = {e: pq.read_table(tmp_path / f"flat-{e}" / "topic=orders") for e in ("arrow", "spark")}
    assert flat["spark"].schema.names == flat["arrow"].schema.names
    assert "value_status" in flat["spark"].schema.names and "value" not in flat["spark"].schema.names
    assert sorted(flat["spark"].to_pylist(), key=lambda row: row["offset"]) == \
        sorted(flat["arrow"].to_pylist(), key=lambda row: row["offset"])
    # --on-value-error fail: the first bad record's one line, status 1, nothing written
    status, error = _convert_run(capsys, str(r.root), str(tmp_path / "failed"), "--engine", "spark", "--master",
                                 "local[2]", "--values", "avro", "--on-value-error", "fail", "--subscribe", "orders")
    assert status == 1 and "unknown schema id 99" in error and "offset 7" in error, error
    assert not (tmp_path / "failed").exists()
    # --mode append: nothing new commits nothing; then only the new records, the new dead letter once
    append = [str(r.root), str(s), "--engine", "spark", "--master", "local[2]", "--values", "avro", "--keys", "avro",
              "--mode", "append"]
    status, again = _convert_run(capsys, *append)
    assert status == 0 and again["since"], again
    grow(r)
    status, more = _convert_run(capsys, *append)
    assert status == 0 and more["dead_letters"] == 1 and more["records"] == 7, more
    rows = pq.read_table(s / "topic=orders", columns=["offset", "value"]).to_pylist()
    assert sorted(row["offset"] for row in rows) == sorted(r.good)
    assert {row["offset"]: row["value"] for row in rows} == r.good
    assert sorted(row["offset"] for row in _folder(s / "_dead_letter")) == sorted(r.bad)


def test_convert_with_spark_protobuf_and_json_values_equals_the_arrow_engine(spark, tmp_path, capsys):
    """``kbatch convert --engine spark --values protobuf`` and ``--values json`` (a registry JSON
    Schema subject): the same typed rows, summary and dead letters as the arrow engine."""
    import struct

    import pyarrow.parquet as pq

    import kbatch
    from kbatch import values

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    lines = [{"subject": "porders-value", "version": 1, "id": 5, "schema": PROTO, "schemaType": "PROTOBUF"},
             {"subject": "jorders-value", "version": 1, "id": 6, "schema": json.dumps(JSON_SCHEMA),
              "schemaType": "JSON"}]
    (schemas / "registry.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    order = values.compile_proto(PROTO).message_class()
    proto = [b"\x00" + struct.pack(">I", 5) + b"\x00" + order(id=i, customer=f"c{i}", status=i % 3,
                                                             nums=[i] * i).SerializeToString() for i in range(5)]
    proto[2] = b"\x00" + struct.pack(">I", 5) + b"\x00" + b"\x12\x02\xff\xfe"  # customer: invalid UTF-8
    jsons = [b"\x00" + struct.pack(">I", 6) + json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(4)]
    jsons[1] = b"\x00" + struct.pack(">I", 6) + b'{"id": "not a number", "name": 1}'
    for fmt, topic, vals in (("protobuf", "porders", proto), ("json", "jorders", jsons)):
        root = tmp_path / f"root-{fmt}"
        with kbatch.LogWriter(root, topic, 0) as w:
            w.append(kbatch.encode(vals, timestamps=[0] * len(vals)))
        runs = {}
        for engine in ("arrow", "spark"):
            out = tmp_path / f"{fmt}-{engine}"
            status, summary = _convert_run(capsys, str(root), str(out), "--engine", engine, "--values", fmt,
                                           "--registry", str(schemas),
                                           *(["--master", "local[2]"] if engine == "spark" else []))
            assert status == 0, summary
            runs[engine] = (out, summary)
        (a, sa), (s, ss) = runs["arrow"], runs["spark"]
        assert ss["engine"] == "spark" and ss["dead_letters"] == sa["dead_letters"] == 1, (fmt, sa, ss)
        assert ss["records"] == sa["records"] and ss["value_errors"] == sa["value_errors"]
        columns = ["value", "value_schema_id", "partition", "offset", "timestamp"]
        rows = {e: sorted(pq.read_table(runs[e][0] / f"topic={topic}", columns=columns).to_pylist(),
                          key=lambda row: row["offset"]) for e in runs}
        assert rows["spark"] == rows["arrow"] and len(rows["arrow"]) == len(vals) - 1
        assert spark.read.parquet(str(s / f"topic={topic}")).schema == \
            spark.read.parquet(str(a / f"topic={topic}")).schema
        assert _folder(s / "_dead_letter") == _folder(a / "_dead_letter")
        assert [row["offset"] for row in _folder(s / "_dead_letter")] == [2 if fmt == "protobuf" else 1]


def test_the_sources_registry_options(typed, tmp_path):
    """``schemaRegistry.path`` (a root holding ``_schemas``, else schema files), the root's own
    ``_schemas`` by default, ``schemaRegistry.url`` with its credentials (no Spark needed)."""
    from kbatch.spark._values import open_registry

    root, _ = typed
    assert open_registry({}, str(root)).latest("orders-value").id == V2_ID
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "7.avsc").write_text(json.dumps(V1))
    assert open_registry({"schemaregistry.path": str(tmp_path / "files")}, str(root)).schema(7).text == json.dumps(V1)
    assert open_registry({"schemaregistry.path": str(root)}, "/nowhere").schema(V1_ID).text == json.dumps(V1)
    with RegistryServer() as server:
        server.state.register("orders-value", json.dumps(V1), schema_id=V1_ID)
        server.state.basic = ("u", "p:w")
        reg = open_registry({"schemaregistry.url": server.url, "schemaregistry.basic.auth.user.info": "u:p:w"}, "/x")
        assert reg.schema(V1_ID).text == json.dumps(V1)
    with pytest.raises(ValueError, match="not both"):
        open_registry({"schemaregistry.url": "http://127.0.0.1:1", "schemaregistry.path": "/x"}, "/x")


PROTO = """syntax = "proto3";
package shop;
enum Status { UNKNOWN = 0; NEW = 1; PAID = 2; }
message Order { int64 id = 1; string customer = 2; Status status = 3; repeated int32 nums = 4; }
"""
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}


def _json_and_protobuf_root(tmp_path: Path) -> tuple[Path, Path]:
    """A root with Confluent-framed Protobuf values (``porders``, id 5), JSON Schema values
    (``jorders``, id 6) and plain JSON (``plain``); and a directory of the registry's answers."""
    import struct

    import kbatch
    from kbatch import values

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    lines = [{"subject": "porders-value", "version": 1, "id": 5, "schema": PROTO, "schemaType": "PROTOBUF"},
             {"subject": "jorders-value", "version": 1, "id": 6, "schema": json.dumps(JSON_SCHEMA),
              "schemaType": "JSON"}]
    (schemas / "registry.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    order = values.compile_proto(PROTO).message_class()
    root = tmp_path / "root"
    topics = {
        "porders": [b"\x00" + struct.pack(">I", 5) + b"\x00" +
                    order(id=i, customer=f"c{i}", status=i % 3, nums=[i] * i).SerializeToString() for i in (1, 2, 3)],
        "jorders": [b"\x00" + struct.pack(">I", 6) + json.dumps({"id": i, "name": f"n{i}", "x": 0}).encode()
                    for i in (1, 2)],
        "plain": [json.dumps({"id": i, "name": f"p{i}"}).encode() for i in (7, 8)],
    }
    for topic, vals in topics.items():
        with kbatch.LogWriter(root, topic, 0) as w:
            w.append(kbatch.encode(vals, timestamps=[0] * len(vals)))
    return root, schemas


def test_json_and_protobuf_values_through_decode_values_and_value_format(spark, tmp_path):
    """``decode_values(format=...)`` and ``valueFormat=json|protobuf``: registry JSON Schema and
    Protobuf values typed by their subject's latest schema, plain JSON by ``valueSchema``, and
    ``from_protobuf``'s ``enums.as.ints``."""
    from kbatch.values import JsonSchemaError, ProtobufSchemaError

    root, schemas = _json_and_protobuf_root(tmp_path)
    reg = Registry.from_directory(schemas)
    protos = [{"id": 1, "customer": "c1", "status": "NEW", "nums": [1]},
              {"id": 2, "customer": "c2", "status": "PAID", "nums": [2, 2]},
              {"id": 3, "customer": "c3", "status": None, "nums": [3, 3, 3]}]  # UNKNOWN (0) is not emitted
    jsons = [{"id": 1, "name": "n1"}, {"id": 2, "name": "n2"}]  # fields outside the schema dropped

    def load(topic, **options):
        reader = spark.read.format("kafka-log").option("subscribe", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(str(root))

    def typed(df, column="value"):
        return [r[column] for r in _collect(df, ["offset", column])]

    by_fn = kbatch.spark.decode_values(load("porders"), reg, topic="porders", format="protobuf")
    by_src = load("porders", valueFormat="protobuf", **{"schemaRegistry.path": str(schemas)})
    for frame in (by_fn, by_src):
        assert frame.schema["value"].dataType.simpleString() == \
            "struct<id:bigint,customer:string,status:string,nums:array<int>>"
        assert typed(frame) == protos
        assert typed(frame, "value_schema_id") == [5, 5, 5]
    ints = load("porders", valueFormat="protobuf", readerSchema=PROTO, **{"schemaRegistry.path": str(schemas),
                                                                         "enums.as.ints": "true"})
    assert [r["status"] for r in typed(ints)] == [1, 2, None]

    by_fn = kbatch.spark.decode_values(load("jorders"), reg, topic="jorders")  # format="auto": the subject's JSON
    by_src = load("jorders", valueFormat="json", **{"schemaRegistry.path": str(schemas)})
    for frame in (by_fn, by_src):
        assert frame.schema["value"].dataType.simpleString() == "struct<id:bigint,name:string>"
        assert typed(frame) == jsons

    schema_file = tmp_path / "plain.json"
    schema_file.write_text(json.dumps(JSON_SCHEMA))
    by_fn = kbatch.spark.decode_values(load("plain"), None, reader_schema=json.dumps(JSON_SCHEMA), format="json")
    by_src = load("plain", valueFormat="json", valueSchema=str(schema_file))
    for frame in (by_fn, by_src):
        assert typed(frame) == [{"id": 7, "name": "p7"}, {"id": 8, "name": "p8"}]
        assert typed(frame, "value_schema_id") == [None, None]

    with pytest.raises(ProtobufSchemaError, match="JSON, not PROTOBUF"):
        kbatch.spark.decode_values(load("jorders"), reg, topic="jorders", format="protobuf")
    with pytest.raises(JsonSchemaError, match="needs its JSON Schema"):
        kbatch.spark.decode_values(load("plain"), None, format="json")


def test_the_sources_json_and_protobuf_options(tmp_path):
    """The options of ``valueFormat=json|protobuf`` checked before Spark reads (no Spark needed)."""
    from kbatch import values
    from kbatch.spark import kafka_struct
    from kbatch.spark._values import source_values

    root, schemas = _json_and_protobuf_root(tmp_path)
    path = {"schemaregistry.path": str(schemas)}
    got = source_values({"valueformat": "protobuf", "enums.as.ints": "true", "messagename": "Order",
                         "recursive.fields.max.depth": "3", "convert.any.fields.to.json": "true", **path},
                        str(root), lambda: ["porders"])
    (d,) = got.decodings
    assert (d.format, d.protobuf.enums_as_ints, d.protobuf.recursive_depth, d.protobuf.message) == \
        ("protobuf", True, 3, "Order")
    assert d.protobuf.any_as_json
    desc = tmp_path / "order.desc"  # a descriptor set file, as from_protobuf's descFilePath
    desc.write_bytes(values.compile_proto(PROTO).descriptor_set)
    got = source_values({"valueformat": "protobuf", "readerschema": str(desc), "messagename": "shop.Order", **path},
                        str(root), list)
    assert got.decodings[0].reader.message == "shop.Order"
    assert got.struct(kafka_struct()).simpleString().count("status:string") == 1
    with pytest.raises(ValueError, match="a descriptor set needs messageName"):
        source_values({"valueformat": "protobuf", "readerschema": str(desc), **path}, str(root), list)
    plain = source_values({"valueformat": "json", "valueschema": json.dumps(JSON_SCHEMA)}, "/nowhere", list)
    assert plain.registry is None and plain.decodings[0].plain
    for raw, message in [
        ({"enums.as.ints": "true"}, "is for valueFormat or keyFormat"),
        ({"valueformat": "avro", "valueschema": "{}"}, "valueSchema .* is for valueFormat=json"),
        ({"valueformat": "json", "enums.as.ints": "true", **path}, "are for valueFormat=protobuf"),
        ({"valueformat": "protobuf", "enums.as.ints": "maybe", **path}, "must be true or false"),
    ]:
        with pytest.raises(ValueError, match=message):
            source_values(raw, str(root), lambda: ["porders"])


def test_value_format_protobuf_any_as_json(spark, tmp_path):
    """The ``kafka-log`` option ``convert.any.fields.to.json`` (``from_protobuf``'s): a
    ``google.protobuf.Any`` is a JSON string column, as ``kbatch.values.decode`` gives it."""
    import struct

    import kbatch
    from kbatch import values
    from kbatch.values import ProtoOptions

    text = """syntax = "proto3";
package box;
import "google/protobuf/any.proto";
message Box { string name = 1; google.protobuf.Any payload = 2; }
message Note { string text = 1; }
"""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "registry.jsonl").write_text(json.dumps({"subject": "boxes-value", "version": 1, "id": 9,
                                                        "schema": text, "schemaType": "PROTOBUF"}) + "\n")
    compiled = values.compile_proto(text)
    box, note = compiled.message_class("box.Box"), compiled.message_class("box.Note")
    packed = box(name="a")
    packed.payload.Pack(note(text="hi"))
    vals = [b"\x00" + struct.pack(">I", 9) + b"\x00" + m.SerializeToString() for m in (packed, box(name="b"))]
    with kbatch.LogWriter(tmp_path / "root", "boxes", 0) as w:
        w.append(kbatch.encode(vals, timestamps=[0] * len(vals)))
    df = (spark.read.format("kafka-log").option("subscribe", "boxes").option("valueFormat", "protobuf")
          .option("schemaRegistry.path", str(schemas)).option("convert.any.fields.to.json", "true")
          .load(str(tmp_path / "root")))
    assert df.schema["value"].dataType.simpleString() == "struct<name:string,payload:string>"
    got = [r["value"] for r in _collect(df, ["offset", "value"])]
    assert got == [{"name": "a", "payload": '{"@type":"type.googleapis.com/box.Note","text":"hi"}'},
                   {"name": "b", "payload": None}]
    arrow = values.decode(pa.table({"value": pa.array(vals, pa.binary())}), Registry.from_directory(schemas),
                          protobuf=ProtoOptions(any_as_json=True)).column("value").to_pylist()
    assert arrow == got


def test_convert_with_spark_writes_dead_letters_outside_out(spark, tmp_path, capsys):
    """Issue 35 item 10e: --dead-letter PATH outside OUT, as --help promises for both engines: the
    executors write the dead letters beside the data, the driver commits them to PATH (its own
    ledger), the same records as the arrow engine's; nothing of them in OUT."""
    from support.avro_root import write_avro_root

    r = write_avro_root(tmp_path / "root")
    got = {}
    for engine in ("arrow", "spark"):
        apart = tmp_path / f"dead-{engine}"
        status, summary = _convert_run(capsys, str(r.root), str(tmp_path / engine), "--engine", engine,
                                       "--values", "avro", "--subscribe", "orders", "--dead-letter", str(apart),
                                       *(["--master", "local[2]"] if engine == "spark" else []))
        assert status == 0, summary
        assert summary["dead_letters"] == 3 and summary["dead_letter_path"] == str(apart), summary
        assert not (tmp_path / engine / "_dead_letter").exists()
        assert sorted(p.name for p in apart.iterdir()) == ["_kbatch_ledger", "topic=orders"]
        got[engine] = _folder(apart)
    assert got["spark"] == got["arrow"] and sorted(row["offset"] for row in got["spark"]) == sorted(r.bad)
