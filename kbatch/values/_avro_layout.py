"""The output of an Avro reader schema: its columns, as the kernel fills them and Arrow types them.

A reader schema is laid out once as a tree of :class:`Slot` over a flat list of :class:`Column`
in pre-order (a list column's child right after it), under Spark's type mapping
(``SchemaConverters``, what ``from_avro`` gives):

=========================================  =============================================
Avro                                       Arrow
=========================================  =============================================
null                                       null
boolean, int, long, float, double          bool, int32, int64, float32, float64
date                                       date32
time-millis, time-micros                   int32, int64
timestamp-millis, timestamp-micros         timestamp[us, tz=UTC] (millis scaled)
local-timestamp-millis, -micros            timestamp[us] (no time zone)
timestamp-nanos, local-timestamp-nanos     int64 (Spark has no nanosecond timestamp)
bytes, fixed, duration                     binary
string, enum, uuid (string and fixed)      string
decimal (bytes and fixed)                  decimal128(precision, scale)
record                                     struct (fields not null unless a nullable union)
array, map                                 list<element>, map<string, value>
["null", T], [T]                           T, nullable
[int, long], [float, double] (+ null)      int64, float64
other unions                               struct<member0, member1, ...> (one per non-null
                                           branch; the struct is null for a null branch)
=========================================  =============================================

Recursive types are refused (:class:`AvroSchemaError`): an Arrow schema is finite.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ._avro_schema import AvroType
from ._avrokernel import KINDS
from ._errors import AvroSchemaError

__all__ = ["Column", "Layout", "Slot"]

NULLT, BOOL, FIXEDW, BIN, LIST, STRUCT = (KINDS[k] for k in ("NULLT", "BOOL", "FIXEDW", "BIN", "LIST", "STRUCT"))
MAX_DECIMAL_PRECISION = 38

_UTC = pa.timestamp("us", tz="UTC")
_LOCAL = pa.timestamp("us")


@dataclass(eq=False)
class Column:
    """One output column: its kernel kind, value width, parent (-1 for the root), nullability,
    and Arrow type (for struct, list and map columns: built from the children)."""

    kind: int
    width: int
    parent: int
    nullable: bool
    arrow: pa.DataType | None = None
    name: str = ""
    children: list[int] = field(default_factory=list)
    map_type: bool = False


@dataclass(eq=False)
class Slot:
    """A reader type laid out: where it writes (:attr:`col`) and how.

    ``form`` is ``"plain"`` (the type itself), ``"nullable"`` (a union of null and one type,
    or of int/long or float/double: :attr:`target` is the slot values go to, its column
    nullable when null is a branch) or ``"members"`` (any other union: a struct column with one
    nullable member slot per non-null branch, :attr:`members`).
    """

    type: AvroType
    col: int
    form: str = "plain"
    target: Slot | None = None
    members: list[Slot] = field(default_factory=list)
    member_branch: list[int] = field(default_factory=list)
    fields: dict[str, Slot] = field(default_factory=dict)
    item: Slot | None = None
    key_col: int = -1
    entries_col: int = -1


class Layout:
    """The columns of a reader schema under a type mapping (``"spark"``).

    Attributes
    ----------
    columns : list of Column
        In pre-order; the root (the ``value`` column, always nullable) first.
    root : Slot
    """

    def __init__(self, reader: AvroType, mapping: str = "spark") -> None:
        if mapping != "spark":
            raise ValueError(f"mapping must be 'spark', got {mapping!r}")
        self.columns: list[Column] = []
        self._records: list[str] = []
        self.root = self._slot(reader, -1, True, "value")

    def coldesc(self) -> list[int]:
        """``kind, width, parent, nullable`` per column, for the kernel."""
        out: list[int] = []
        for c in self.columns:
            out += [c.kind, c.width, c.parent, int(c.nullable)]
        return out

    def subtree(self, col: int) -> list[int]:
        """``col`` and the columns that get a slot whenever it does (through structs, not lists)."""
        out = [col]
        if self.columns[col].kind == STRUCT:
            for child in self.columns[col].children:
                out += self.subtree(child)
        return out

    def _new(self, kind: int, width: int, parent: int, nullable: bool, name: str,
             arrow: pa.DataType | None = None) -> int:
        self.columns.append(Column(kind, width, parent, nullable, arrow, name))
        index = len(self.columns) - 1
        if parent >= 0:
            self.columns[parent].children.append(index)
        return index

    def _slot(self, t: AvroType, parent: int, nullable: bool, name: str) -> Slot:
        if t.kind == "union":
            return self._union(t, parent, nullable, name)
        if t.kind == "record":
            assert t.name is not None
            if t.name in self._records:
                raise AvroSchemaError(f"recursive type {t.name!r} is not supported (a reader schema must be finite)")
            col = self._new(STRUCT, 0, parent, nullable, name)
            slot = Slot(t, col)
            self._records.append(t.name)
            for f in t.fields:
                slot.fields[f.name] = self._slot(f.type, col, False, f.name)
            self._records.pop()
            return slot
        if t.kind == "array":
            assert t.items is not None
            col = self._new(LIST, 0, parent, nullable, name)
            slot = Slot(t, col)
            slot.item = self._slot(t.items, col, False, "element")
            return slot
        if t.kind == "map":
            assert t.values is not None
            col = self._new(LIST, 0, parent, nullable, name)
            self.columns[col].map_type = True
            slot = Slot(t, col)
            slot.entries_col = self._new(STRUCT, 0, col, False, "entries")
            slot.key_col = self._new(BIN, 0, slot.entries_col, False, "key", pa.string())
            slot.item = self._slot(t.values, slot.entries_col, False, "value")
            return slot
        kind, width, arrow = _leaf(t)
        return Slot(t, self._new(kind, width, parent, nullable or t.kind == "null", name, arrow))

    def _union(self, t: AvroType, parent: int, nullable: bool, name: str) -> Slot:
        has_null = any(b.kind == "null" for b in t.branches)
        others = [i for i, b in enumerate(t.branches) if b.kind != "null"]
        kinds = {t.branches[i].kind for i in others}
        if not others:
            target = self._slot(t.branches[0], parent, True, name)
            return Slot(t, target.col, "nullable", target=target)
        if len(others) == 1 or kinds in ({"int", "long"}, {"float", "double"}):
            inner = t.branches[others[0]] if len(others) == 1 else AvroType("long" if "long" in kinds else "double")
            target = self._slot(inner, parent, nullable or has_null, name)
            return Slot(t, target.col, "nullable", target=target)
        col = self._new(STRUCT, 0, parent, nullable or has_null, name)
        slot = Slot(t, col, "members")
        for k, i in enumerate(others):
            slot.members.append(self._slot(t.branches[i], col, True, f"member{k}"))
            slot.member_branch.append(i)
        return slot

    def arrow_type(self, col: int) -> pa.DataType:
        """The Arrow type of column ``col`` (built from its children for nested columns)."""
        c = self.columns[col]
        if c.arrow is not None:
            return c.arrow
        if c.kind == STRUCT:
            return pa.struct([self.arrow_field(child) for child in c.children])
        child = c.children[0]
        if c.map_type:
            entries = self.columns[child]
            value = self.arrow_field(entries.children[1])
            return pa.map_(self.arrow_field(entries.children[0]).with_nullable(False), value)  # Avro: string
        return pa.list_(self.arrow_field(child))

    def arrow_field(self, col: int) -> pa.Field:
        """Column ``col`` as an Arrow field (name, type, nullability)."""
        c = self.columns[col]
        return pa.field(c.name, self.arrow_type(col), nullable=c.nullable)


def _leaf(t: AvroType) -> tuple[int, int, pa.DataType]:
    """Kernel kind, width and Arrow type of a type that is not a record, array, map or union."""
    logical = t.logical
    if t.kind == "null":
        return NULLT, 0, pa.null()
    if t.kind == "boolean":
        return BOOL, 0, pa.bool_()
    if t.kind == "int":
        return FIXEDW, 4, pa.date32() if logical == "date" else pa.int32()
    if t.kind == "long":
        if logical in ("timestamp-millis", "timestamp-micros"):
            return FIXEDW, 8, _UTC
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return FIXEDW, 8, _LOCAL
        return FIXEDW, 8, pa.int64()
    if t.kind == "float":
        return FIXEDW, 4, pa.float32()
    if t.kind == "double":
        return FIXEDW, 8, pa.float64()
    if logical == "decimal":
        if t.precision > MAX_DECIMAL_PRECISION:
            raise AvroSchemaError(f"decimal precision {t.precision} is more than {MAX_DECIMAL_PRECISION} "
                                  f"(Spark's and decimal128's limit)")
        return FIXEDW, 16, pa.decimal128(t.precision, t.scale)
    if t.kind in ("string", "enum") or logical == "uuid":
        return BIN, 0, pa.string()
    if t.kind in ("bytes", "fixed"):
        return BIN, 0, pa.binary()
    raise AvroSchemaError(f"no column for Avro type {t.kind!r}")
