"""Debezium change events as its connectors write them, and a plain-dictionary replay of them, for the
tests of ``kbatch convert --cdc debezium``.

The envelopes follow the documented examples (written here, not copied):

- PostgreSQL: debezium.io/documentation/reference/stable/connectors/postgresql.html, "Data change
  events" -> "Change event keys" / "Change event values" (the ``customers`` table: ``id`` the
  primary key, ``first_name``, ``last_name``, ``email``; ``source`` with ``version``,
  ``connector``, ``name``, ``ts_ms``, ``snapshot``, ``db``, ``sequence``, ``schema``, ``table``,
  ``txId``, ``lsn``, ``xmin``; "truncate events": ``op: "t"``, no key, no before or after);
- MySQL: debezium.io/documentation/reference/stable/connectors/mysql.html, "Change event values"
  (``source`` with ``server_id``, ``gtid``, ``file``, ``pos``, ``row``, ``thread``, ``query``);
- a delete is followed by a tombstone (``tombstones.on.delete``, default true); an update that
  changes the primary key is a delete of the old key (and its tombstone) and a create of the
  new one ("Primary key updates"); snapshot rows are ``op: "r"``;
- JSON: Kafka Connect's ``JsonConverter`` with ``schemas.enable=true`` (``{"schema", "payload"}``
  for keys and values); Avro: Confluent's ``AvroConverter`` (the envelope an Avro record
  ``Envelope`` with ``before``/``after`` unions of null and ``Value``), framed with its schema id,
  the schemas in the root's ``_schemas`` topic (``<topic>-key`` and ``<topic>-value``).

:func:`replay` is the oracle: the envelopes applied one by one in the order they were written,
to a dictionary (create, update and read set the key's row, delete and a tombstone drop it, a
truncate empties it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

import kbatch
from support.duckdb_readers import duckdb_with

from . import schemas_topic
from .avro_root import avro, framed

#: the documented example table's columns
COLUMNS = ("id", "first_name", "last_name", "email")
TS0 = 1_700_000_000_000


def _connect_field(name: str, kind: str, optional: bool) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "field": name}


ROW_SCHEMA = {"type": "struct", "fields": [_connect_field("id", "int32", False),
                                           _connect_field("first_name", "string", False),
                                           _connect_field("last_name", "string", False),
                                           _connect_field("email", "string", True)],
              "optional": True, "name": "dbserver1.inventory.customers.Value"}
KEY_SCHEMA = {"type": "struct", "fields": [_connect_field("id", "int32", False)], "optional": False,
              "name": "dbserver1.inventory.customers.Key"}
SOURCES = {
    "postgres": [("version", "string", False), ("connector", "string", False), ("name", "string", False),
                 ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
                 ("sequence", "string", True), ("schema", "string", False), ("table", "string", False),
                 ("txId", "int64", True), ("lsn", "int64", True), ("xmin", "int64", True)],
    "mysql": [("version", "string", False), ("connector", "string", False), ("name", "string", False),
              ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
              ("table", "string", True), ("server_id", "int64", False), ("gtid", "string", True),
              ("file", "string", False), ("pos", "int64", False), ("row", "int32", False),
              ("thread", "int64", True), ("query", "string", True)],
}


def envelope_schema(connector: str) -> dict[str, Any]:
    """The value's Kafka Connect schema (``io.debezium.connector.<c>.Envelope``)."""
    source = {"type": "struct", "fields": [_connect_field(*f) for f in SOURCES[connector]], "optional": False,
              "name": f"io.debezium.connector.{connector}.Source", "field": "source"}
    return {"type": "struct", "optional": False, "name": "dbserver1.inventory.customers.Envelope", "version": 1,
            "fields": [{**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"}, source,
                       _connect_field("op", "string", False), _connect_field("ts_ms", "int64", True)]}


_AVRO_TYPES = {"int32": "int", "int64": "long", "string": "string"}


def _avro_field(name: str, kind: str, optional: bool) -> dict[str, Any]:
    t = _AVRO_TYPES[kind]
    return {"name": name, "type": ["null", t], "default": None} if optional else {"name": name, "type": t}


def avro_schemas(connector: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(key, value) Avro schemas as the AvroConverter derives them from the Connect schemas."""
    value_row = {"type": "record", "name": "Value", "namespace": "dbserver1.inventory.customers",
                 "fields": [_avro_field(f["field"], f["type"], f["optional"]) for f in ROW_SCHEMA["fields"]]}
    source = {"type": "record", "name": "Source", "namespace": f"io.debezium.connector.{connector}",
              "fields": [_avro_field(*f) for f in SOURCES[connector]]}
    value = {"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers",
             "fields": [{"name": "before", "type": ["null", value_row], "default": None},
                        {"name": "after", "type": ["null", "Value"], "default": None},
                        {"name": "source", "type": source}, {"name": "op", "type": "string"},
                        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    key = {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
           "fields": [{"name": "id", "type": "int"}]}
    return key, value


@dataclass
class Event:
    """One record of the topic: its partition, key and value (None: a tombstone or no key)."""

    partition: int
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    timestamp: int


@dataclass
class History:
    """A database's changes as the connector's records, in the order written."""

    connector: str = "postgres"
    partitions: int = 1
    events: list[Event] = field(default_factory=list)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)  # the database's table now
    clock: int = 0

    def _source(self, snapshot: bool) -> dict[str, Any]:
        self.clock += 1
        common = {"version": "2.5.0.Final", "connector": self.connector, "name": "dbserver1",
                  "ts_ms": TS0 + self.clock, "snapshot": "true" if snapshot else "false", "db": "inventory"}
        if self.connector == "postgres":
            return {**common, "sequence": None, "schema": "public", "table": "customers", "txId": 500 + self.clock,
                    "lsn": 24_000_000 + 8 * self.clock, "xmin": None}
        return {**common, "table": "customers", "server_id": 223344, "gtid": None, "file": "mysql-bin.000003",
                "pos": 150 + 100 * self.clock, "row": 0, "thread": 7, "query": None}

    def _emit(self, key: int | None, op: str, before: Any, after: Any, snapshot: bool = False) -> None:
        source = self._source(snapshot)
        part = 0 if key is None else key % self.partitions  # the key's hash picks the partition
        value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"] + 3}
        self.events.append(Event(part, None if key is None else {"id": key}, value, source["ts_ms"]))

    def row(self, key: int, n: int) -> dict[str, Any]:
        return {"id": key, "first_name": f"Anne{n}", "last_name": "Kretchmar", "email": None if n % 3 else
                f"annek{n}@noanswer.org"}

    def insert(self, key: int, snapshot: bool = False) -> None:
        self.rows[key] = self.row(key, self.clock)
        self._emit(key, "r" if snapshot else "c", None, self.rows[key], snapshot)

    def update(self, key: int) -> None:
        before = self.rows[key]
        self.rows[key] = {**self.row(key, self.clock), "last_name": "Kretchmar-Updated"}
        # Postgres with REPLICA IDENTITY DEFAULT: no before image of an update
        self._emit(key, "u", before if self.connector == "mysql" else None, self.rows[key])

    def delete(self, key: int, tombstone: bool = True) -> None:
        before = self.rows.pop(key)  # Postgres: as with REPLICA IDENTITY FULL, the whole old row
        self._emit(key, "d", before, None)
        if tombstone:
            self.clock += 1
            self.events.append(Event(key % self.partitions, {"id": key}, None, TS0 + self.clock))

    def rekey(self, key: int, new: int) -> None:
        """An update of the primary key: a delete (and its tombstone) and a create."""
        row = self.rows[key]
        self.delete(key)
        self.rows[new] = {**row, "id": new}
        self._emit(new, "c", None, self.rows[new])

    def truncate(self) -> None:
        self.rows.clear()
        source = self._source(False)
        self.events.append(Event(0, None, {"before": None, "after": None, "source": source, "op": "t",
                                           "ts_ms": source["ts_ms"] + 3}, source["ts_ms"]))


def replay(events: list[Event]) -> dict[int, dict[str, Any]]:
    """The oracle: the envelopes applied in the order written, to a dictionary by primary key."""
    table: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.value is None:
            if e.key is not None:
                table.pop(e.key["id"], None)
            continue
        op = e.value["op"]
        if op in ("c", "u", "r"):
            table[e.key["id"]] = dict(e.value["after"])
        elif op == "d":
            table.pop(e.key["id"], None)
        elif op == "t":
            table.clear()
    return table


def documented(connector: str, partitions: int = 1) -> History:
    """The documented operations on ``customers``: a snapshot, creates, updates, a delete with its
    tombstone, a primary key update (delete + tombstone + create)."""
    h = History(connector, partitions)
    for key in (1001, 1002, 1003):
        h.insert(key, snapshot=True)
    h.insert(1004)
    h.update(1004)
    h.update(1002)
    h.delete(1001)
    h.rekey(1003, 1013)
    h.update(1013)
    return h


#: random change histories' actions (hypothesis): (what, a key, another key for a re-key)
ACTIONS = st.lists(st.tuples(st.sampled_from(["insert", "update", "delete", "delete-no-tombstone", "rekey",
                                              "truncate", "snapshot"]),
                             st.integers(0, 6), st.integers(7, 12)), min_size=1, max_size=25)


def history(actions: list[tuple[str, int, int]], connector: str, partitions: int) -> History:
    """The history :data:`ACTIONS` draws: each action applied where it is one the database could do."""
    h = History(connector, partitions)
    h.insert(actions[0][1])  # a first key: the keys' schema is known from the first run
    for what, key, other in actions:
        if what in ("insert", "snapshot") and key not in h.rows:
            h.insert(key, snapshot=what == "snapshot")
        elif what in ("insert", "update", "snapshot") and key in h.rows:
            h.update(key)
        elif what.startswith("delete") and key in h.rows:
            h.delete(key, tombstone=what == "delete")
        elif what == "rekey" and key in h.rows and other not in h.rows:
            h.rekey(key, other)
        elif what == "truncate":
            h.truncate()
    return h


def as_of_value(h: History, cut: int, by: str) -> tuple[list[str], list[Event]]:
    """The ``--as-of`` arguments of a cut after ``h.events[:cut]``, and the events the table then holds."""
    if by == "offsets":
        held: dict[int, int] = {}
        for e in h.events[:cut]:
            held[e.partition] = held.get(e.partition, 0) + 1
        parts = {e.partition for e in h.events}
        return ["--as-of", json.dumps({"customers": {str(p): held.get(p, 0) for p in sorted(parts)}})], h.events[:cut]
    last = h.events[cut - 1].timestamp  # every record at or before that time, none after
    shift = 3 if by == "ts_ms" else 0  # the envelope's ts_ms is 3 ms after its source.ts_ms
    more = [] if by == "timestamp" else ["--as-of-by", by]
    return ["--as-of", str(last + shift), *more], [e for e in h.events if e.timestamp <= last]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_json(e: Event, connector: str) -> tuple[bytes | None, bytes | None]:
    """(key, value) as the JsonConverter writes them with schemas.enable=true."""
    key = None if e.key is None else _json({"schema": KEY_SCHEMA, "payload": e.key})
    value = None if e.value is None else _json({"schema": envelope_schema(connector), "payload": e.value})
    return key, value


KEY_ID, VALUE_ID = 1, 2


def encode_avro(e: Event, connector: str) -> tuple[bytes | None, bytes | None]:
    """(key, value) as the AvroConverter writes them (Confluent frame, schema ids 1 and 2)."""
    key_schema, value_schema = avro_schemas(connector)
    key = None if e.key is None else framed(KEY_ID, avro(key_schema, e.key))
    value = None if e.value is None else framed(VALUE_ID, avro(value_schema, e.value))
    return key, value


def write(root: Path, topic: str, events: list[Event], encoding: str, connector: str, *,
          written: dict[int, int] | None = None, extra: list[tuple[int, bytes | None, bytes | None]] = (),
          coder: Callable[[Event], tuple[bytes | None, bytes | None]] | None = None) -> None:
    """Append ``events`` to ``<topic>-<partition>`` under ``root`` (``written``: how many records
    each partition holds already, updated), encoded by ``encoding`` (``json``, ``avro``: the
    schemas registered in ``_schemas`` first; ``protobuf``: by ``coder``, a
    :class:`support.debezium_protobuf.ProtobufCoder`); ``extra``: raw (partition, key, value)
    records after."""
    written = written if written is not None else {}
    if encoding == "avro" and not (root / "_schemas-0").exists():
        key_schema, value_schema = avro_schemas(connector)
        schemas_topic.write_topic(root, [schemas_topic.schema(f"{topic}-key", 1, KEY_ID, json.dumps(key_schema)),
                                         schemas_topic.schema(f"{topic}-value", 1, VALUE_ID,
                                                              json.dumps(value_schema))])
    by_part: dict[int, list[tuple[bytes | None, bytes | None, int]]] = {}
    for e in events:
        if encoding == "protobuf":
            assert coder is not None, "protobuf: give the coder (support.debezium_protobuf.coder)"
            k, v = coder(e)
        else:
            k, v = (encode_avro if encoding == "avro" else encode_json)(e, connector)
        by_part.setdefault(e.partition, []).append((k, v, e.timestamp))
    for p, k, v in extra:
        by_part.setdefault(p, []).append((k, v, TS0 + 10_000_000))
    for p, records in sorted(by_part.items()):
        base = written.get(p, 0)
        with kbatch.LogWriter(root, topic, p) as w:
            w.append(kbatch.encode([v for _, v, _ in records], keys=[k for k, _, _ in records], base_offset=base,
                                   timestamps=[t for _, _, t in records]))
        written[p] = base + len(records)


def fresh(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)


def read_table(fmt: str, out: Path, topic: str, reader: str) -> list[dict[str, Any]]:
    """The rows of ``topic``'s table as ``reader`` (pyiceberg, deltalake or duckdb) reads them."""
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table(f"kafka.{topic}")
        if reader == "duckdb":
            cur = duckdb_with("avro", "iceberg").execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')")
        else:
            return table.scan().to_arrow().to_pylist()
    else:
        if reader == "duckdb":
            cur = duckdb_with("delta").execute(f"SELECT * FROM delta_scan('{out / topic}')")
        else:
            from deltalake import DeltaTable

            return DeltaTable(str(out / topic)).to_pyarrow_table().to_pylist()
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def mixed_history() -> History:
    """A short history over two partitions with each kind of change: creates, an update, a delete,
    a primary key change, a truncate, and creates and an update after it."""
    h = History("postgres", partitions=2)
    for key in range(1, 7):
        h.insert(key)
    h.update(1)
    h.delete(2)
    h.rekey(3, 13)
    h.truncate()
    h.insert(20)
    h.insert(4)
    h.update(20)
    return h


def backup_of(root: Path, backup: Path) -> Path:
    """``root`` as a backup of two brokers' log dirs: broker-1 holds every partition, broker-2 a
    replica of each ``customers`` partition (the same records: ``--recursive`` reads one copy)."""
    for broker in ("broker-1", "broker-2"):
        (backup / broker).mkdir(parents=True)
        for p in root.iterdir():
            if p.is_file():
                shutil.copy(p, backup / broker / p.name)
            elif broker == "broker-1" or p.name.startswith("customers-"):
                shutil.copytree(p, backup / broker / p.name)
    return backup
