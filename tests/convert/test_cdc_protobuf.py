"""``kbatch convert --cdc debezium --values protobuf|auto`` (issue 38): Debezium envelopes as
Confluent's ProtobufConverter writes them (:mod:`support.debezium_protobuf`: the ``.proto``
ProtobufData derives from the Connect schema, the bytes from the real protobuf library framed by
confluent-kafka's ``ProtobufSerializer`` against the test registry over HTTP), for the Postgres
and MySQL documented examples and each way the converter may write an optional field; the table
equals the plain-dictionary replay, read back by pyiceberg, deltalake and DuckDB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import debezium as dbz
from support import debezium_protobuf as dpb

from kbatch.cli import main

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")
pytest.importorskip("grpc_tools")
pytest.importorskip("confluent_kafka.schema_registry.protobuf")
from support.registry_server import RegistryServer

FORMATS = ("delta", "iceberg")


def convert(root: Path, out: Path, fmt: str, url: str, *more: str, values: str = "protobuf") -> int:
    return main(["convert", str(root), str(out), "--format", fmt, "--values", values, "--cdc", "debezium",
                 "--registry", url, "--engine", "arrow", "--progress", "never", "-q", *more])


def want(events: list[dbz.Event], nullables: str) -> dict[int, dict[str, Any]]:
    """The replay, each row as a reader of the converter's bytes gets it back."""
    return {k: dpb.as_read(row, nullables, dpb.row_fields()) for k, row in dbz.replay(events).items()}


def table_of(fmt: str, out: Path, reader: str = "native") -> dict[int, dict[str, Any]]:
    rows = dbz.read_table(fmt, out, "customers", reader)
    assert len({r["id"] for r in rows}) == len(rows), "one row per primary key"
    return {int(r["id"]): {c: (int(r[c]) if c == "id" else r[c]) for c in dbz.COLUMNS} for r in rows}


def changes(connector: str, partitions: int = 2) -> dbz.History:
    """The documented operations, then a row of key 0 with a null column (both written as no bytes
    by a plain proto3 field), a delete without its tombstone, a truncate and rows after it."""
    h = dbz.documented(connector, partitions)
    h.insert(0)
    h.insert(7)
    h.update(7)
    h.delete(1004, tombstone=False)
    h.truncate()
    h.insert(1013)  # a key the table held before the truncate
    h.insert(3)
    h.update(3)
    return h


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("connector", ["postgres", "mysql"])
@pytest.mark.parametrize("nullables", dpb.NULLABLES)
def test_documented_examples_give_the_database_table(tmp_path, fmt, connector, nullables):
    h = changes(connector)
    cut = next(i for i, e in enumerate(h.events) if e.value is not None and e.value["op"] == "t")
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    position = "source.lsn" if connector == "postgres" else "source.pos"
    with RegistryServer() as server:
        coder = dpb.coder(tmp_path / "proto", server.url, "customers", connector, nullables)
        written: dict[int, int] = {}
        dbz.write(root, "customers", h.events[:cut], "protobuf", connector, coder=coder, written=written)
        assert convert(root, out, fmt, server.url, "--cdc-columns", f"op,ts_ms,source.ts_ms,{position}") == 0
        first = want(h.events[:cut], nullables)
        assert 0 in first and table_of(fmt, out) == first  # key 0 (no bytes at all) is a key
        assert any(r["email"] is None for r in dbz.replay(h.events[:cut]).values())  # a null in the history
        dbz.write(root, "customers", h.events[cut:], "protobuf", connector, coder=coder, written=written)
        assert convert(root, out, fmt, server.url, "--mode", "append",
                       "--cdc-columns", f"op,ts_ms,source.ts_ms,{position}") == 0
        assert dbz.replay(h.events) == h.rows  # the oracle agrees with the database
        assert table_of(fmt, out) == want(h.events, nullables) == table_of(fmt, out, "duckdb")
        assert set(h.rows) == {1013, 3}
    rows = {r["id"]: r for r in dbz.read_table(fmt, out, "customers", "native")}
    last = [e.value for e in h.events if e.value is not None and e.key == {"id": 3}][-1]
    name = position.split(".")[1]
    assert (rows[3]["__op"], rows[3]["__ts_ms"], rows[3]["__source_ts_ms"], rows[3][f"__source_{name}"]) == \
        ("u", last["ts_ms"], last["source"]["ts_ms"], last["source"][name])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("by", ["timestamp", "source.ts_ms", "ts_ms", "offsets"])
def test_as_of_then_append_carries_it_forward(tmp_path, fmt, by):
    h = changes("postgres", partitions=3)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    with RegistryServer() as server:
        coder = dpb.coder(tmp_path / "proto", server.url, "customers", "postgres", "optional")
        dbz.write(root, "customers", h.events, "protobuf", "postgres", coder=coder)
        for cut in (5, len(h.events) - 4):
            args, held = dbz.as_of_value(h, cut, by)
            more = [] if cut == 5 else ["--mode", "append"]
            assert convert(root, out, fmt, server.url, *args, *more) == 0
            assert table_of(fmt, out) == want(held, "optional")
        assert convert(root, out, fmt, server.url, "--mode", "append") == 0
    assert table_of(fmt, out) == want(h.events, "optional") == h.rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_auto_reads_the_protobuf_envelopes(tmp_path, fmt):
    h = changes("mysql")
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    with RegistryServer() as server:
        coder = dpb.coder(tmp_path / "proto", server.url, "customers", "mysql", "wrapper")
        dbz.write(root, "customers", h.events, "protobuf", "mysql", coder=coder)
        assert convert(root, out, fmt, server.url, values="auto") == 0
    assert table_of(fmt, out) == want(h.events, "wrapper") == h.rows


def test_a_key_of_zero_is_a_key_not_a_dead_letter(tmp_path):
    """Regression: a proto3 field without presence holding 0 is written as no bytes; the envelope's
    primary key 0 was read as null (Spark's ``from_protobuf`` default), so the change of key 0 went
    to the dead letters as having no key. ``--cdc`` reads Protobuf as the ProtobufConverter does."""
    h = dbz.History("postgres")
    h.insert(0)
    h.insert(1)
    h.update(0)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    with RegistryServer() as server:
        coder = dpb.coder(tmp_path / "proto", server.url, "customers", "postgres", "plain")
        assert coder(h.events[0])[0] == b"\x00\x00\x00\x00\x01\x00"  # the key {id: 0}: a frame, no body
        dbz.write(root, "customers", h.events, "protobuf", "postgres", coder=coder)
        assert convert(root, out, "delta", server.url) == 0
    assert table_of("delta", out) == want(h.events, "plain")
    assert table_of("delta", out)[0]["last_name"] == "Kretchmar-Updated"
    with pytest.raises(Exception, match=r"(?i)not found|no table|does not exist"):
        dbz.read_table("delta", out, "customers__dead_letter", "native")
