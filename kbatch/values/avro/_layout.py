"""The output of an Avro reader schema: its columns, as the kernel fills them and Arrow types them.

A reader schema is laid out once as a tree of :class:`Slot` over a flat list of :class:`Column`
in pre-order (a list column's child right after it), under one of two type mappings: Spark's
(``"spark"``, ``SchemaConverters``, what ``from_avro`` gives) or Arrow's own (``"arrow"``):

=========================================  ============================  ==========================
Avro                                       ``"spark"``                   ``"arrow"``
=========================================  ============================  ==========================
null                                       null                          null
boolean, int, long, float, double          bool, int32, int64, float32,  the same
                                           float64
date                                       date32                        date32
time-millis, time-micros                   int32, int64                  time32[ms], time64[us]
timestamp-millis, -micros, -nanos          timestamp[us, UTC] (millis    timestamp[ms|us|ns, UTC]
                                           scaled); nanos: int64
local-timestamp-millis, -micros, -nanos    timestamp[us]; nanos: int64   timestamp[ms|us|ns]
bytes                                      binary                        binary
fixed                                      binary                        fixed_size_binary(size)
duration                                   binary                        month_day_nano_interval
string                                     string                        string
enum                                       string                        dictionary<int32, string>
uuid (on string or fixed)                  string                        fixed_size_binary(16)
decimal (bytes and fixed)                  decimal128(precision, scale)  the same
record                                     struct                        struct
array, map                                 list, map<string, value>      the same
["null", T], [T]                           T, nullable                   the same
[int, long], [float, double] (+ null)      int64, float64                the same
other unions                               struct<member0, member1,      dense_union<one child per
                                           ...> (a nullable member per   branch, named by its type>
                                           non-null branch)              (a null child for null)
=========================================  ============================  ==========================

Record fields are not null unless their type is a union with null. Recursive types (an Arrow
schema is finite) are refused unless ``max_depth`` cuts them as Spark's
``recursiveFieldMaxDepth`` does: a record met again inside itself is kept while it has been
entered fewer than ``max_depth`` times, else the field holding it is dropped from the type (and
an array, map or union of nothing but it too); the compiler then skips its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from .._errors import AvroSchemaError
from ._avrokernel import KINDS
from ._schema import AvroType

__all__ = ["Column", "Layout", "Slot"]

NULLT, BOOL, FIXEDW, BIN, LIST, STRUCT = (KINDS[k] for k in ("NULLT", "BOOL", "FIXEDW", "BIN", "LIST", "STRUCT"))
MAX_DECIMAL_PRECISION = 38
#: Spark's ``RECURSIVE_FIELD_MAX_DEPTH_LIMIT``: the deepest cut ``max_depth`` may ask for.
MAX_RECURSION_DEPTH = 15
MAPPINGS = ("spark", "arrow")



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
    #: ``"dictionary"`` (enum symbols: a string column turned into a dictionary of the reader's
    #: symbols) or ``"dense_union"`` (a struct of members turned into a dense union).
    convert: str = ""
    symbols: tuple[str, ...] = ()
    #: A dense union's null branch (its type code), or -1.
    null_code: int = -1
    #: Decoded but left out of its struct's Arrow type and array (a Protobuf oneof member's
    #: sibling kept by a projection only to clear it: see ``kbatch.values.protobuf._compile``).
    hidden: bool = False


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
    """The columns of a reader schema under a type mapping (``"spark"`` or ``"arrow"``).

    Attributes
    ----------
    columns : list of Column
        In pre-order; the root (the ``value`` column, always nullable) first.
    root : Slot
    mapping : str
    max_depth : int or None
        How deep a recursive record is kept (Spark's ``recursiveFieldMaxDepth``); None refuses
        recursion.
    """

    def __init__(self, reader: AvroType, mapping: str = "spark", max_depth: int | None = None) -> None:
        if mapping not in MAPPINGS:
            raise ValueError(f"mapping must be 'spark' or 'arrow', got {mapping!r}")
        if max_depth is not None and (isinstance(max_depth, bool) or not 1 <= max_depth <= MAX_RECURSION_DEPTH):
            raise ValueError(f"max_depth must be 1 to {MAX_RECURSION_DEPTH} (Spark's recursiveFieldMaxDepth), "
                             f"got {max_depth!r}")
        self.mapping = mapping
        self.max_depth = max_depth
        self.columns: list[Column] = []
        self._records: dict[str, int] = {}
        root = self._slot(reader, -1, True, "value")
        assert root is not None  # the outermost record is always entered
        self.root = root

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

    def _drop(self, mark: int, parent: int) -> None:
        """Take back the columns made since ``mark`` (a type cut at the recursion depth)."""
        del self.columns[mark:]
        if parent >= 0:
            self.columns[parent].children = [c for c in self.columns[parent].children if c < mark]

    def _slot(self, t: AvroType, parent: int, nullable: bool, name: str) -> Slot | None:
        """``t`` laid out under ``parent``; None when ``t`` is cut at the recursion depth."""
        mark = len(self.columns)
        if t.kind == "union":
            return self._union(t, parent, nullable, name)
        if t.kind == "record":
            assert t.name is not None
            depth = self._records.get(t.name, 0)
            if depth and self.max_depth is None:
                raise AvroSchemaError(f"recursive type {t.name!r} cannot be laid out (an Arrow schema is finite): "
                                      f"give max_depth= (1-{MAX_RECURSION_DEPTH}, as Spark's recursiveFieldMaxDepth) "
                                      f"to cut it at a depth")
            if depth and self.max_depth is not None and depth >= self.max_depth:
                return None
            col = self._new(STRUCT, 0, parent, nullable, name)
            slot = Slot(t, col)
            self._records[t.name] = depth + 1
            for f in t.fields:
                sub = self._slot(f.type, col, False, f.name)
                if sub is not None:
                    slot.fields[f.name] = sub
            self._records[t.name] = depth
            return slot
        if t.kind == "array":
            assert t.items is not None
            col = self._new(LIST, 0, parent, nullable, name)
            slot = Slot(t, col)
            slot.item = self._slot(t.items, col, False, "element")
            if slot.item is None:
                self._drop(mark, parent)
                return None
            return slot
        if t.kind == "map":
            assert t.values is not None
            col = self._new(LIST, 0, parent, nullable, name)
            self.columns[col].map_type = True
            slot = Slot(t, col)
            slot.entries_col = self._new(STRUCT, 0, col, False, "entries")
            slot.key_col = self._new(BIN, 0, slot.entries_col, False, "key", pa.string())
            slot.item = self._slot(t.values, slot.entries_col, False, "value")
            if slot.item is None:
                self._drop(mark, parent)
                return None
            return slot
        kind, width, arrow = _leaf(t, self.mapping)
        col = self._new(kind, width, parent, nullable or t.kind == "null", name, arrow)
        if self.mapping == "arrow" and t.kind == "enum":
            self.columns[col].convert = "dictionary"
            self.columns[col].symbols = t.symbols
        return Slot(t, col)

    def _union(self, t: AvroType, parent: int, nullable: bool, name: str) -> Slot | None:
        mark = len(self.columns)
        has_null = any(b.kind == "null" for b in t.branches)
        others = [i for i, b in enumerate(t.branches) if b.kind != "null"]
        kinds = {t.branches[i].kind for i in others}
        if not others:
            target = self._slot(t.branches[0], parent, True, name)
            return None if target is None else Slot(t, target.col, "nullable", target=target)
        if len(others) == 1 or kinds in ({"int", "long"}, {"float", "double"}):
            inner = t.branches[others[0]] if len(others) == 1 else AvroType("long" if "long" in kinds else "double")
            target = self._slot(inner, parent, nullable or has_null, name)
            return None if target is None else Slot(t, target.col, "nullable", target=target)
        dense = self.mapping == "arrow" and parent >= 0  # the root stays a struct: it may be null
        col = self._new(STRUCT, 0, parent, nullable or has_null, name)
        slot = Slot(t, col, "members")
        for k, i in enumerate(others):  # Spark names a member by its place, a dropped one's name unused
            branch = t.branches[i]
            label = branch.name or branch.kind if dense else f"member{k}"
            member = self._slot(branch, col, True, label)
            if member is not None:
                slot.members.append(member)
                slot.member_branch.append(i)
        if not slot.members:
            self._drop(mark, parent)
            return None
        if dense:
            self.columns[col].convert = "dense_union"
            self.columns[col].null_code = len(slot.members) if has_null else -1
        return slot

    def arrow_type(self, col: int) -> pa.DataType:
        """The Arrow type of column ``col`` (built from its children for nested columns)."""
        c = self.columns[col]
        if c.convert == "dictionary":
            return pa.dictionary(pa.int32(), pa.string())
        if c.arrow is not None:
            return c.arrow
        if c.convert == "dense_union":
            fields = [self.arrow_field(child) for child in c.children]
            if c.null_code >= 0:
                fields.append(pa.field("null", pa.null()))
            return pa.dense_union(fields)
        if c.kind == STRUCT:
            return pa.struct([self.arrow_field(child) for child in c.children if not self.columns[child].hidden])
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


def _leaf(t: AvroType, mapping: str = "spark") -> tuple[int, int, pa.DataType]:
    """Kernel kind, width and Arrow type of a type that is not a record, array, map or union
    (an enum under ``"arrow"``: its string column, made a dictionary after the kernel)."""
    logical = t.logical
    arrow = mapping == "arrow"
    if t.kind == "null":
        return NULLT, 0, pa.null()
    if t.kind == "boolean":
        return BOOL, 0, pa.bool_()
    if t.kind == "int":
        if logical == "date":
            return FIXEDW, 4, pa.date32()
        return FIXEDW, 4, pa.time32("ms") if arrow and logical == "time-millis" else pa.int32()
    if t.kind == "long":
        unit = _UNITS.get(logical or "")
        if arrow and logical == "time-micros":
            return FIXEDW, 8, pa.time64("us")
        if logical is not None and unit is not None and (arrow or unit != "ns"):
            return FIXEDW, 8, pa.timestamp(unit if arrow else "us", tz=None if logical.startswith("local") else "UTC")
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
    if arrow and logical == "uuid":
        return FIXEDW, 16, pa.binary(16)
    if arrow and logical == "duration":
        return FIXEDW, 16, pa.month_day_nano_interval()
    if arrow and t.kind == "fixed" and t.size > 0:  # (a zero-size fixed stays binary: no zero-width column)
        return FIXEDW, t.size, pa.binary(t.size)
    if t.kind in ("string", "enum") or logical == "uuid":
        return BIN, 0, pa.string()
    if t.kind in ("bytes", "fixed"):
        return BIN, 0, pa.binary()
    raise AvroSchemaError(f"no column for Avro type {t.kind!r}")


_UNITS = {"timestamp-millis": "ms", "timestamp-micros": "us", "timestamp-nanos": "ns",
          "local-timestamp-millis": "ms", "local-timestamp-micros": "us", "local-timestamp-nanos": "ns"}
