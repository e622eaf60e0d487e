"""``kbatch convert --cdc debezium``: a Debezium change stream as the table the database held.

Debezium writes one record per row change; its value is an envelope (Debezium's "Change event
values" in each connector's documentation)::

    value   = {"before": row | null, "after": row | null, "op": "c" | "u" | "d" | "r" | "t" | "m",
               "source": {..., "ts_ms", "lsn" (Postgres) | "file", "pos" (MySQL), ...},
               "ts_ms": long | null, "transaction": {...} | null}
    key     = {the primary key's columns} | null (a table without one)
    a delete is followed by a tombstone: the same key, a null value (for log compaction)

Decoded as typed values (``--values avro|json|protobuf|auto``; the keys by the same language
unless ``--keys`` says otherwise; Kafka Connect's JSON with an embedded schema,
``{"schema": ..., "payload": ...}``, read through its ``schema``:
:func:`kbatch.values.connect_json_schema`), each record becomes a change by its key
(:class:`kbatch.tables.Keyed`, applied at the commit by the Iceberg and Delta sinks):

- ``c`` (create), ``u`` (update), ``r`` (a snapshot read): the ``after`` image inserted, or
  replacing the row of its key;
- ``d`` (delete), and a tombstone: the key's row deleted (the tombstone after a delete deletes
  nothing more; one left alone after compaction removed its delete still deletes);
- ``t`` (truncate): every row before it removed (:mod:`kbatch.tables._upsert` says which);
- anything else is a dead letter with its reason: a value that is not an envelope (no ``op``),
  an unknown ``op`` (``m``, a logical decoding message, is not a row change), ``c``/``u``/``r``
  without ``after``, a change without a key.

The table's columns are the ``after`` row's fields (the primary key's among them; a key field
``after`` lacks is added), then the ``--cdc-columns`` asked for, named as Debezium's own
``ExtractNewRecordState`` names them: ``op`` -> ``__op``, ``ts_ms`` -> ``__ts_ms``,
``source.lsn`` -> ``__source_lsn`` (any field of ``source``), and the record's ``partition``,
``offset``, ``timestamp`` -> ``__partition``, ``__offset``, ``__timestamp``. A key changed by an
update is, as Debezium writes it, a delete of the old key and a create of the new one.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from kbatch.errors import ValueDecodeError
from kbatch.tables import ROUTE, Keyed, Ledger

from ._values import usage

__all__ = ["CDC_FORMATS", "CdcPlan", "check_cdc_arguments", "plan_cdc"]

#: The change-event formats ``--cdc`` reads.
CDC_FORMATS = ("debezium",)

#: The columns each change carries to the sink besides the table's (not written).
OP, PARTITION, OFFSET, TIMESTAMP = "_kbatch_op", "_kbatch_partition", "_kbatch_offset", "_kbatch_timestamp"
#: The ops of a row change, and what each does (:mod:`kbatch.tables._upsert`'s ``u``, ``d``, ``t``).
_DOES = {"c": "u", "u": "u", "r": "u", "d": "d", "t": "t"}
#: The record's own columns ``--cdc-columns`` may add.
_RECORD = ("partition", "offset", "timestamp")


def check_cdc_arguments(args: argparse.Namespace) -> None:
    """``--cdc`` against the other options, before any work; the keys decoded by the values'
    language unless ``--keys`` is given. Raises the convert's ``UsageError``."""
    cdc = getattr(args, "cdc", None)
    if cdc is None:
        if getattr(args, "cdc_columns", None):
            raise usage("--cdc-columns needs --cdc debezium")
        return
    if args.format not in ("iceberg", "delta"):
        raise usage(f"--cdc {cdc} writes --format iceberg or delta (rows are replaced and deleted by key; a folder "
                    f"of {args.format} files cannot)")
    if not args.values:
        raise usage(f"--cdc {cdc} reads the envelopes as typed values: give --values avro, json, protobuf or auto")
    if getattr(args, "upsert", False):
        raise usage("--cdc applies the changes by the key's fields itself: leave out --upsert")
    if args.flatten_values:
        raise usage("--cdc writes the after image's fields as the columns already: leave out --flatten-values")
    if args.mode == "overwrite":
        raise usage("--cdc merges the changes into the table: use --mode append (or a new OUT), not overwrite")
    if args.keys is None:
        args.keys = args.values
    if args.partition_by is None:
        args.partition_by = ["none"]  # the database's rows have no record time


@dataclass
class _Topic:
    """How one topic's decoded records become changes."""

    #: the table's columns (the sink's schema for the topic)
    schema: Any
    keys: tuple[str, ...]
    #: whether the value (key) is Kafka Connect's {"schema", "payload"}: the payload is the envelope (key)
    value_payload: bool
    key_payload: bool
    #: column name -> where its value is: ("after", field), ("key", field), ("env", field),
    #: ("source", field), ("record", column)
    where: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class CdcPlan:
    """The changes of each topic (made by :func:`plan_cdc`), applied to the decoded batches by
    :meth:`apply` (called by :meth:`kbatch.convert._values.ValuePlan.decode`)."""

    topics: dict[str, _Topic]
    #: ``--as-of-by source.ts_ms|ts_ms``: (the envelope's field, the time in ms), or None
    as_of: tuple[str, int] | None = None
    #: (topic, partition) -> the offset of its first change later than :attr:`as_of`
    cuts: dict[tuple[str, int], int] = field(default_factory=dict)

    def trim(self, converted: Ledger) -> Ledger:
        """``converted`` (the ranges read) ending at each partition's cut (:attr:`as_of`)."""
        out = []
        for r in converted:
            cut = self.cuts.get((r.topic, r.partition))
            out.append(r if cut is None or cut >= r.end else r.read(r.start, max(r.start, cut), r.missing))
        return Ledger(out)

    def notes(self) -> list[str]:
        """What ``--as-of`` cut, in words."""
        if self.as_of is None:
            return []
        field_, ms = self.as_of
        cut = ", ".join(f"{t}-{p} at offset {o}" for (t, p), o in sorted(self.cuts.items())) or "no partition"
        return [(f"--as-of {ms} by {field_}: {cut} (its first change later than that; a later --mode append "
                 "goes on from there)")]

    def before_cut(self, dead: Any) -> Any:
        """``dead`` (dead letters) without those at or after their partition's cut."""
        import pyarrow as pa

        if not self.cuts or not dead.num_rows:
            return dead
        keep = [self.cuts.get((r["topic"], r["partition"]), r["offset"] + 1) > r["offset"]
                for r in dead.select(["topic", "partition", "offset"]).to_pylist()]
        return dead.filter(pa.array(keep, pa.bool_()))

    def _cut(self, topic: str, env: Any, good: Any) -> Any:
        """Whether each of ``good``'s records is before its partition's cut (the least offset of
        a change later than :attr:`as_of` seen so far: this batch's may lower it)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = good.column("partition").combine_chunks()
        offsets = good.column("offset").combine_chunks()
        if self.as_of is None:
            return pa.array([True] * good.num_rows, pa.bool_())
        name, ms = self.as_of
        when = (pc.struct_field(pc.struct_field(env, "source"), "ts_ms") if name == "source.ts_ms"
                else pc.struct_field(env, "ts_ms"))
        late = pc.fill_null(pc.greater(when, ms), False)
        for part in pc.unique(parts).to_pylist():
            mine = pc.and_(late, pc.equal(parts, part))
            if pc.any(mine).as_py():  # the least: batches read out of offset order cut right too
                first = pc.min(offsets.filter(mine)).as_py()
                self.cuts[(topic, part)] = min(self.cuts.get((topic, part), first), first)
        keep = pa.array([True] * good.num_rows, pa.bool_())
        for (t, part), cut in self.cuts.items():
            if t == topic:
                keep = pc.and_(keep, pc.invert(pc.and_(pc.equal(parts, part), pc.greater_equal(offsets, cut))))
        return keep

    def left_out(self, selected: list[str]) -> list[str]:
        """The selected topics that are not change streams (internal ones: ``_schemas``, ...)."""
        return [t for t in selected if t not in self.topics]

    @property
    def schemas(self) -> dict[str, Any]:
        """topic -> the table's schema."""
        return {t: p.schema for t, p in self.topics.items()}

    def columns(self) -> list[str]:
        """Every table's columns (``--partition-by`` is checked against them)."""
        return list(dict.fromkeys(name for p in self.topics.values() for name in p.schema.names))

    def keyed(self) -> dict[str, Keyed]:
        """topic -> how its sink applies the changes."""
        return {t: Keyed(keys=p.keys, op=OP, order=(PARTITION, OFFSET, TIMESTAMP), route=ROUTE)
                for t, p in self.topics.items()}

    def apply(self, topic: str, raw: Any, good: Any, *, fail: bool) -> tuple[Any, Any]:
        """``good`` (``topic``'s decoded records, a ``pyarrow.Table``) as ``(changes, dead
        letters)``: the changes in the table's columns and the hidden ones, and the records of
        ``raw`` (the same records undecoded) that are not changes, with why. With ``fail``, the
        first of those raises :class:`~kbatch.errors.ValueDecodeError`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        p = self.topics[topic]
        value, key = (pa.concat_arrays(good.column(c).chunks) if good.column(c).num_chunks
                      else pa.array([], good.schema.field(c).type) for c in ("value", "key"))
        env = pc.struct_field(value, "payload") if p.value_payload else value
        if p.key_payload:
            key = pc.struct_field(key, "payload")
        tombstone = pc.is_null(value)
        has = set(env.type.names)
        op = pc.struct_field(env, "op") if "op" in has else pa.nulls(len(env), pa.string())
        after = pc.struct_field(env, "after")
        does = pc.fill_null(pc.if_else(tombstone, "d", _map(op, _DOES)), "")
        reason = _reasons(op, does, after, key, tombstone, p.keys)
        keep = self._cut(topic, env, good)
        bad = pc.and_(pc.is_valid(reason), keep)
        dead = self._dead(raw, good, reason, bad, topic, fail)
        ok = pc.and_(pc.invert(bad), keep)
        columns: dict[str, Any] = {}
        for f in p.schema:
            kind, name = p.where[f.name]
            if kind == "after":
                column = pc.struct_field(after, name)
                if name in p.keys:  # the key's value where after has none (a delete)
                    column = pc.coalesce(column, pc.struct_field(key, name).cast(column.type))
            elif kind == "key":
                column = pc.struct_field(key, name)
            elif kind == "env":
                column = pc.struct_field(env, name)
            elif kind == "source":
                column = pc.struct_field(pc.struct_field(env, "source"), name)
            else:
                column = good.column(name).combine_chunks()
            columns[f.name] = column.cast(f.type)
        hidden = {ROUTE: good.column("topic").combine_chunks(), OP: does,
                  PARTITION: good.column("partition").combine_chunks(), OFFSET: good.column("offset").combine_chunks(),
                  TIMESTAMP: good.column("timestamp").combine_chunks()}
        rows = pa.table({**columns, **hidden}).filter(ok)
        return rows, dead

    def _dead(self, raw: Any, good: Any, reason: Any, bad: Any, topic: str, fail: bool) -> Any:
        """The records of ``raw`` whose decoded row in ``good`` is ``bad``, as dead letters with ``reason``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from kbatch.values import dead_letter_schema

        schema = dead_letter_schema(raw.schema)
        if not pc.any(bad).as_py():
            return schema.empty_table()
        which = good.filter(bad).select(["partition", "offset"]).to_pylist()
        why = reason.filter(bad).to_pylist()
        ids = good.column("value_schema_id").filter(bad).to_pylist() if "value_schema_id" in good.column_names \
            else [None] * len(why)
        if fail:
            at = which[0]
            raise ValueDecodeError(why[0], topic=topic, partition=at["partition"], offset=at["offset"],
                                   path="key" if why[0].startswith("no key") else "value")
        index = {(r["partition"], r["offset"]): i
                 for i, r in enumerate(raw.select(["partition", "offset"]).to_pylist())}
        rows = raw.take(pa.array([index[(r["partition"], r["offset"])] for r in which], pa.int64()))
        errors = [f"{w} ({topic}-{r['partition']} offset {r['offset']})" for w, r in zip(why, which, strict=True)]
        paths = ["key" if w.startswith("no key") else "value" for w in why]
        extra = [pa.array(["value"] * len(why)), pa.array(ids, pa.int32()), pa.array(errors), pa.array(why),
                 pa.array(paths), pa.nulls(len(why), pa.int64())]
        return pa.Table.from_arrays(list(rows.columns) + extra, schema=schema)


def _map(op: Any, table: dict[str, str]) -> Any:
    """``op`` (strings) with each value of ``table``'s keys replaced by its value, others null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    at = pc.index_in(op, value_set=pa.array(list(table)))
    return pc.take(pa.array(list(table.values())), at)


def _reasons(op: Any, does: Any, after: Any, key: Any, tombstone: Any, keys: tuple[str, ...]) -> Any:
    """Why each record is not a change (null: it is one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    no_key = pc.is_null(key)
    for name in keys:
        no_key = pc.or_(no_key, pc.is_null(pc.struct_field(key, name)))
    unknown = pc.binary_join_element_wise(pa.scalar("not a row change: op '"), op, pa.scalar("'"), "")
    reason = pa.nulls(len(op), pa.string())
    checks = [  # the first that holds is the reason (later ones only where no earlier one did)
        (pc.and_(pc.invert(tombstone), pc.is_null(op)), pa.scalar("not a Debezium envelope: no op")),
        (pc.and_(pc.invert(tombstone), pc.equal(does, "")), unknown),
        (pc.and_(pc.equal(does, "u"), pc.is_null(after)), pc.binary_join_element_wise(
            pa.scalar("op '"), op, pa.scalar("' without an after image"), "")),
        (pc.and_(pc.not_equal(does, "t"), no_key), pa.scalar("no key (a table without a primary key cannot be "
                                                             "applied by key)")),
    ]
    for cond, text in checks:
        cond = pc.and_(pc.fill_null(cond, False), pc.is_null(reason))
        reason = pc.if_else(cond, text, reason)
    return reason


def _struct(t: Any, where: str) -> Any:
    import pyarrow as pa

    if not pa.types.is_struct(t):
        raise usage(f"{where} is {t}, not a record")
    return t


def plan_cdc(args: argparse.Namespace, schemas: dict[str, Any], decoded: set[str]) -> CdcPlan | None:
    """The changes of the topics whose values were decoded (``decoded``), from their decoded
    ``schemas``; None without ``--cdc``. An internal topic (``_schemas``) is left out; a topic whose
    values are not Debezium envelopes, or whose keys are not records, is refused (the convert's
    ``UsageError``)."""
    import pyarrow as pa

    if getattr(args, "cdc", None) is None:
        return None
    asked = [c.strip() for c in (args.cdc_columns or "").split(",") if c.strip()]
    topics: dict[str, _Topic] = {}
    for topic, schema in schemas.items():
        if topic not in decoded and topic.startswith("_"):  # the registry's _schemas, ...: not changes
            continue
        if topic not in decoded:
            raise usage(f"--cdc: {topic}'s values are not decoded (no value schema for it): convert it apart")
        env = schema.field("value").type
        value_payload = pa.types.is_struct(env) and env.names == ["payload"] and pa.types.is_struct(env[0].type)
        env = _struct(env[0].type if value_payload else env, f"{topic}'s value")
        if "op" not in env.names or "after" not in env.names:
            raise usage(f"--cdc debezium: {topic}'s values are not Debezium envelopes (fields {', '.join(env.names)}; "
                        "expected before, after, op, source, ts_ms)")
        after = _struct(env.field("after").type, f"{topic}'s after image")
        key = schema.field("key").type
        if not pa.types.is_struct(key):
            raise usage(f"--cdc: {topic}'s keys are not decoded (no key schema, subject {topic}-key): the primary "
                        "key is the record key's fields")
        key_payload = key.names == ["payload"] and pa.types.is_struct(key[0].type)
        key = key[0].type if key_payload else key
        where = {f.name: ("after", f.name) for f in after}
        fields = [f.with_nullable(True) for f in after]
        for f in key:
            if f.name not in where:
                where[f.name] = ("key", f.name)
                fields.append(f.with_nullable(True))
        for item in asked:
            if item in ("op", "ts_ms"):
                if item not in env.names:
                    raise usage(f"--cdc-columns {item}: {topic}'s envelopes have no {item}")
                name, spot, t = f"__{item}", ("env", item), env.field(item).type
            elif item.startswith("source."):
                src = env.field("source").type if "source" in env.names else pa.struct([])
                part = item[len("source."):]
                if not pa.types.is_struct(src) or part not in src.names:
                    raise usage(f"--cdc-columns {item}: {topic}'s source block has no {part} (it has "
                                f"{', '.join(src.names) if pa.types.is_struct(src) else 'none'})")
                name, spot, t = f"__source_{part}", ("source", part), src.field(part).type
            elif item in _RECORD:
                name, spot, t = f"__{item}", ("record", item), schema.field(item).type
            else:
                raise usage(f"--cdc-columns {item}: one of op, ts_ms, source.<field>, partition, offset, timestamp")
            where[name] = spot
            fields.append(pa.field(name, t))
        clash = sorted(n for n in where if n.startswith("_kbatch_"))
        if clash:
            raise usage(f"--cdc: {topic}'s rows have the column(s) {', '.join(clash)}: names beginning _kbatch_ are "
                        "kbatch's, for the changes' order and routing")
        if len(where) != len(fields):
            raise usage(f"--cdc-columns: a column named twice in {topic}'s rows")
        topics[topic] = _Topic(pa.schema(fields), tuple(key.names), value_payload, key_payload, where)
        if getattr(args, "as_of_ms", None) is not None:
            have = ("source" in env.names and pa.types.is_struct(env.field("source").type)
                    and "ts_ms" in env.field("source").type.names) if args.as_of_by == "source.ts_ms" \
                else "ts_ms" in env.names
            if not have:
                raise usage(f"--as-of-by {args.as_of_by}: {topic}'s envelopes have no {args.as_of_by}")
    as_of = (args.as_of_by, args.as_of_ms) if getattr(args, "as_of_ms", None) is not None else None
    return CdcPlan(topics, as_of)
