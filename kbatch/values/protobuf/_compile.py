"""A Protobuf message compiled into the Protobuf kernel's program and laid out as columns.

The layout follows Spark's ``from_protobuf`` (``SchemaConverters``) so that Spark reads the
output as it would produce it:

=====================================================  ==========================================
Protobuf                                               Arrow
=====================================================  ==========================================
double, float, bool, string, bytes                     float64, float32, bool, string, binary
int32, sint32, sfixed32, uint32, fixed32               int32 (unsigned: the same bits, as Spark)
int64, sint64, sfixed64, uint64, fixed64               int64 (unsigned: the same bits, as Spark)
enum                                                   string (its name; an unknown number
                                                       ``UNKNOWN_ENUM_VALUE_<Enum>_<n>``, as Java),
                                                       or int32 with ``enums_as_ints``
message                                                struct (null when absent)
repeated T, map<K, V>                                  list<T>, map<K, V> (empty when absent)
oneof                                                  its members as fields, at most one non-null
google.protobuf.Timestamp, Duration                    timestamp[us, UTC], duration[us]
google.protobuf.*Value (wrappers)                      the wrapped scalar, null when absent
google.protobuf.Any                                    struct<type_url: string, value: binary>;
                                                       with ``any_as_json`` (Spark's
                                                       ``convert.any.fields.to.json``) a JSON string
=====================================================  ==========================================

Absent fields as Spark's ``getFieldValue``: one without presence (proto3 implicit) that is
absent or holds its zero is null, or its zero with ``emit_default_values`` (Spark's
``emit.default.values``); a proto2 field with a declared default is that default; other fields
with presence (proto2, proto3 ``optional``, oneof members, messages) are null. A wrapper
holding its zero is null unless ``emit_default_values``. A
recursive message is refused unless ``recursive_depth`` (Spark's ``recursive.fields.max.depth``)
is given: a message type then occurs at most that many times on a path, deeper fields are
dropped (1 drops every recursive field; a map whose values are dropped is dropped whole).
Groups (proto2) are skipped.

With ``fields`` (projection, a :data:`~kbatch.values._fields.FieldTree`) a message instance has
only the kept fields (a singular message field kept in part: an instance of only its kept
fields); the others are not in the field table, so the kernel skips them as it skips unknown
fields. A kept oneof member's siblings stay in the table, hidden (:attr:`Column.hidden`: decoded,
left out of the output; a sibling message with none of its fields), so that a sibling written
after it still clears it, as in the whole decode.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .._errors import ProtobufSchemaError
from .._fields import FieldTree, kept, not_a_record
from ..avro import Column, Layout
from ._protokernel import FLAGS, KINDS, TYPES, WORDS
from ._schema import ProtoSchema
from ._verify import verify_proto

__all__ = ["ProtoLayout", "ProtoProgram"]

NULLT, BOOL, FIXEDW, BIN, LIST, STRUCT = (KINDS[k] for k in ("NULLT", "BOOL", "FIXEDW", "BIN", "LIST", "STRUCT"))
REPEATED, PRESENCE, EMIT, ZERO, DEFAULT, MAP = (FLAGS[k] for k in ("REPEATED", "PRESENCE", "EMIT", "ZERO", "DEFAULT",
                                                                    "MAP"))
MSG_WORDS, FIELD_WORDS = WORDS["MSG"], WORDS["FIELD"]
DENSE_MAX = 512
_WRAPPERS = {
    "google.protobuf.DoubleValue": "DOUBLE", "google.protobuf.FloatValue": "FLOAT",
    "google.protobuf.Int64Value": "INT64", "google.protobuf.UInt64Value": "UINT64",
    "google.protobuf.Int32Value": "INT32", "google.protobuf.UInt32Value": "UINT32",
    "google.protobuf.BoolValue": "BOOL", "google.protobuf.StringValue": "STRING",
    "google.protobuf.BytesValue": "BYTES",
}
# descriptor type number -> kbatch kernel kind, width, Arrow type
_LEAVES: dict[int, tuple[int, int, pa.DataType]] = {
    1: (FIXEDW, 8, pa.float64()), 2: (FIXEDW, 4, pa.float32()), 3: (FIXEDW, 8, pa.int64()),
    4: (FIXEDW, 8, pa.int64()), 5: (FIXEDW, 4, pa.int32()), 6: (FIXEDW, 8, pa.int64()),
    7: (FIXEDW, 4, pa.int32()), 8: (BOOL, 0, pa.bool_()), 9: (BIN, 0, pa.string()),
    12: (BIN, 0, pa.binary()), 13: (FIXEDW, 4, pa.int32()), 14: (BIN, 0, pa.string()),
    15: (FIXEDW, 4, pa.int32()), 16: (FIXEDW, 8, pa.int64()), 17: (FIXEDW, 4, pa.int32()),
    18: (FIXEDW, 8, pa.int64()),
}
_GROUP, _MESSAGE, _ENUM = 10, 11, 14


class ProtoLayout(Layout):
    """The output columns of a Protobuf message (the Avro :class:`Layout`'s columns and Arrow
    types, so the one Arrow layer builds both)."""

    def __init__(self) -> None:  # no Avro reader schema here: the columns are added by ProtoProgram
        self.mapping = "spark"  # Spark's from_protobuf types (no Avro mapping, no Avro recursion cut)
        self.max_depth = None
        self.columns: list[Column] = []
        self._records: dict[str, int] = {}

    def new(self, kind: int, width: int, parent: int, nullable: bool, name: str,
            arrow: pa.DataType | None = None) -> int:
        """Append a column (pre-order) and return its index."""
        return self._new(kind, width, parent, nullable, name, arrow)

    def arrow_type(self, col: int) -> pa.DataType:
        """As :meth:`Layout.arrow_type`; a ``google.protobuf.Any`` rendered as JSON is a string."""
        if self.columns[col].convert == "any_json":
            return pa.string()
        return super().arrow_type(col)


class ProtoProgram:
    """The program and columns of one message of a :class:`ProtoSchema`.

    Parameters
    ----------
    schema : ProtoSchema
        The compiled schema; its :attr:`ProtoSchema.message` lays out the output.
    emit_default_values, enums_as_ints : bool
        Spark's ``emit.default.values`` and ``enums.as.ints``.
    recursive_depth : int
        Spark's ``recursive.fields.max.depth``; -1 refuses recursive messages.
    any_as_json : bool
        Spark's ``convert.any.fields.to.json``: ``google.protobuf.Any`` values as JSON strings
        (the kernel decodes them as structs; :mod:`._any` renders them).
    fields : FieldTree, optional
        Only these fields (projection); None: every field.
    """

    def __init__(self, schema: ProtoSchema, *, emit_default_values: bool = False, enums_as_ints: bool = False,
                 recursive_depth: int = -1, any_as_json: bool = False, fields: FieldTree | None = None) -> None:
        self.schema = schema
        self.any_as_json = any_as_json
        #: the struct columns of ``google.protobuf.Any`` values rendered as JSON strings
        self.any_columns: list[int] = []
        self.message = schema.message
        self.emit = emit_default_values
        self.enums_as_ints = enums_as_ints
        self.depth = recursive_depth
        self.layout = ProtoLayout()
        self.msgs: list[list[int]] = []
        self.fields: list[list[int]] = []
        self.paths: list[str] = []
        self.aux: list[int] = []
        self.consts = bytearray()
        self._enums: dict[str, int] = {}
        self._instance(schema.descriptor(), -1, True, "value", "value", [], map_entry=False, keep=fields)
        arrays = (np.asarray(self.msgs, dtype=np.int32).reshape(-1),
                  np.asarray(self.fields or [[0] * FIELD_WORDS], dtype=np.int32).reshape(-1),
                  np.asarray(self.aux or [0], dtype=np.int32),
                  np.frombuffer(bytes(self.consts) or b"\0", dtype=np.uint8),
                  np.asarray(self.layout.coldesc(), dtype=np.int32))
        verify_proto(*arrays, paths=self.paths)  # once; the kernel then trusts them, read-only
        for a in arrays:
            a.flags.writeable = False
        self._arrays = arrays

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32],
                              npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
        """``(msgs, fields, aux, consts, coldesc)`` as the kernel takes them: verified by
        :func:`~kbatch.values.protobuf._verify.verify_proto` when the program was built, and
        read-only."""
        return self._arrays

    # ------------------------------------------------------------ layout

    def _instance(self, desc: Any, parent: int, nullable: bool, name: str, path: str, stack: list[str],
                  map_entry: bool, keep: FieldTree | None = None) -> int:
        """A message instance (its struct column, fields, dense table), only the fields of
        ``keep`` when given; returns its index."""
        col = self.layout.new(STRUCT, 0, parent, nullable, name)
        mi = len(self.msgs)
        self.msgs.append([col, 0, 0, 0, 0, 0, 0])
        stack = [*stack, desc.full_name]
        rows: list[list[int]] = []
        paths: list[str] = []
        wanted, hidden = _wanted(desc, keep, path)
        for fd in desc.fields:
            if fd.type == _GROUP or (wanted is not None and fd.name not in wanted):
                continue
            done = self._field(fd, col, f"{path}.{fd.name}", stack, map_entry,
                               None if wanted is None else wanted[fd.name])
            if done is not None:
                rows.append(done[0])
                paths.append(done[1])
                if fd.name in hidden:
                    self.layout.columns[done[0][2]].hidden = True
        first = len(self.fields)
        for row, field_path in zip(rows, paths, strict=True):
            self.fields.append(row[:FIELD_WORDS])
            self.paths.append(field_path)
        # oneof siblings (field indexes) in aux
        by_oneof: dict[str, list[int]] = {}
        for k, row in enumerate(rows):
            if row[FIELD_WORDS] >= 0:
                by_oneof.setdefault(str(row[FIELD_WORDS]), []).append(first + k)
        for k, row in enumerate(rows):
            if row[FIELD_WORDS] >= 0:
                sib = [i for i in by_oneof[str(row[FIELD_WORDS])] if i != first + k]
                self.fields[first + k][7] = len(self.aux)
                self.fields[first + k][8] = len(sib)
                self.aux += sib
        numbers = [r[0] for r in rows]
        dense_start, dense_len = 0, 0
        if numbers and max(numbers) < DENSE_MAX:
            dense_start, dense_len = len(self.aux), max(numbers) + 1
            table = [-1] * dense_len
            for k, number in enumerate(numbers):
                table[number] = first + k
            self.aux += table
        sub = self._subtree(col)
        self.msgs[mi] = [col, first, len(rows), dense_start, dense_len, sub, 0]
        return mi

    def _subtree(self, col: int) -> int:
        cols = self.layout.subtree(col)
        at = len(self.aux)
        self.aux += [len(cols), *cols]
        return at

    def _field(self, fd: Any, parent: int, path: str, stack: list[str], map_entry: bool,
               keep: FieldTree | None = None) -> tuple[list[int], str] | None:
        """A field's table row (with its oneof key last) and its path; None: dropped. ``keep``:
        the fields kept of a singular message field (None: all)."""
        mt = fd.message_type if fd.type == _MESSAGE else None
        if keep is not None and (fd.is_repeated or mt is None or _well_known(mt.full_name)
                                 or mt.full_name == "google.protobuf.Any"):
            what = "a repeated field" if fd.is_repeated else f"a {mt.full_name if mt is not None else 'scalar field'}"
            raise not_a_record(path, what, keep)
        if self._cut(mt, path, stack):
            return None
        if mt is not None and mt.GetOptions().map_entry:  # a map whose values are cut is dropped whole
            value = mt.fields_by_name["value"]
            if self._cut(value.message_type if value.type == _MESSAGE else None, f"{path}[].value", stack):
                return None
        repeated = bool(fd.is_repeated)
        presence = bool(getattr(fd, "has_presence", False)) and not repeated
        oneof = fd.containing_oneof
        oneof_key = -1
        if oneof is not None and len(oneof.fields) > 1:
            oneof_key = hash(oneof.full_name) & 0x3FFFFFFF
        flags = (REPEATED if repeated else 0) | (PRESENCE if presence else 0)
        if not repeated and not presence and mt is None and (self.emit or map_entry):
            flags |= EMIT
        if mt is not None and mt.full_name in _WRAPPERS and self.emit:
            flags |= ZERO  # a wrapper holding its zero: the zero (else null, as Spark)
        if not repeated and mt is None and presence and getattr(fd, "has_default_value", False):
            flags |= DEFAULT  # proto2 [default = ...]: absent is that value, as Spark
        name = fd.name
        if repeated:
            is_map = mt is not None and mt.GetOptions().map_entry
            lst = self.layout.new(LIST, 0, parent, False, name)
            if is_map:
                self.layout.columns[lst].map_type = True
                flags |= MAP  # a key met again: the last entry wins
            path += "[]"
            wrapped = mt is not None and mt.full_name in _WRAPPERS  # a zero wrapper: a null item
            ftype, child, inner, item = self._value(fd, mt, lst, "entries" if is_map else "element", wrapped,
                                                    path, stack, is_map)
            row = [fd.number, ftype, lst, item, flags, child, inner, 0, 0, 0]
        else:
            ftype, child, inner, item = self._value(fd, mt, parent, name, not (flags & EMIT), path, stack, False,
                                                    keep)
            if flags & DEFAULT:
                inner = self._default(fd, ftype)
            row = [fd.number, ftype, item, item, flags, child, inner, 0, 0, self._subtree(item)]
        return [*row, oneof_key], path

    def _cut(self, mt: Any, path: str, stack: list[str]) -> bool:
        """Whether a field of message type ``mt`` (None: not a message) at ``path`` is dropped
        by ``recursive_depth``; a recursive one without it is refused."""
        if mt is None or mt.full_name not in stack or _well_known(mt.full_name):
            return False
        if self.depth < 0:
            raise ProtobufSchemaError(f"recursive message {mt.full_name} at {path}: give recursive_depth "
                                      f"(Spark's recursive.fields.max.depth) to cut it")
        return stack.count(mt.full_name) >= self.depth

    def _value(self, fd: Any, mt: Any, parent: int, name: str, nullable: bool, path: str, stack: list[str],
               is_map: bool, keep: FieldTree | None = None) -> tuple[int, int, int, int]:
        """``(type, child, inner, column)`` of one value of ``fd`` (a message: only ``keep``)."""
        if mt is not None:
            full = mt.full_name
            if full == "google.protobuf.Timestamp":
                return TYPES["TIMESTAMP"], 0, 0, self.layout.new(FIXEDW, 8, parent, nullable, name,
                                                                   pa.timestamp("us", tz="UTC"))
            if full == "google.protobuf.Duration":
                return TYPES["DURATION"], 0, 0, self.layout.new(FIXEDW, 8, parent, nullable, name,
                                                                  pa.duration("us"))
            if full in _WRAPPERS:
                inner = TYPES[_WRAPPERS[full]]
                kind, width, arrow = _LEAVES[inner]
                return TYPES["WRAPPER"], 0, inner, self.layout.new(kind, width, parent, nullable, name, arrow)
            mi = self._instance(mt, parent, nullable and not is_map, name, path, stack, map_entry=is_map, keep=keep)
            if full == "google.protobuf.Any" and self.any_as_json:
                self.layout.columns[self.msgs[mi][0]].convert = "any_json"
                self.any_columns.append(self.msgs[mi][0])
            return TYPES["MESSAGE"], mi, 0, self.msgs[mi][0]
        t = fd.type
        if t == _ENUM:
            if self.enums_as_ints:
                return TYPES["ENUM_INT"], 0, 0, self.layout.new(FIXEDW, 4, parent, nullable, name, pa.int32())
            return TYPES["ENUM"], self._enum(fd.enum_type), 0, self.layout.new(BIN, 0, parent, nullable, name,
                                                                               pa.string())
        kind, width, arrow = _LEAVES[t]
        return t, 0, 0, self.layout.new(kind, width, parent, nullable, name, arrow)

    def _default(self, fd: Any, ftype: int) -> int:
        """A proto2 field's declared default in ``aux`` (its wire value as two words, or a
        string's place in ``consts``); returns where."""
        v = fd.default_value
        at = len(self.aux)
        if isinstance(v, (str, bytes)):
            data = v.encode() if isinstance(v, str) else v
            self.aux += [len(self.consts), len(data)]
            self.consts += data
            return at
        if ftype == TYPES["DOUBLE"]:
            bits = struct.unpack("<Q", struct.pack("<d", v))[0]
        elif ftype == TYPES["FLOAT"]:
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
        elif ftype in (TYPES["SINT32"], TYPES["SINT64"]):
            bits = (int(v) << 1) ^ (int(v) >> 63)
        else:
            bits = int(v)
        bits &= (1 << 64) - 1
        lo, hi = bits & 0xFFFFFFFF, bits >> 32
        self.aux += [lo - (1 << 32) if lo >= 1 << 31 else lo, hi - (1 << 32) if hi >= 1 << 31 else hi]
        return at

    def _enum(self, et: Any) -> int:
        at = self._enums.get(et.full_name)
        if at is not None:
            return at
        values: dict[int, str] = {}
        for v in et.values:
            values.setdefault(v.number, v.name)
        prefix = f"UNKNOWN_ENUM_VALUE_{et.name}_".encode()[:64]
        at = len(self.aux)
        self.aux += [len(values), len(self.consts), len(prefix)]
        self.consts += prefix
        for number, name in values.items():
            data = name.encode()
            self.aux += [number, len(self.consts), len(data)]
            self.consts += data
        self._enums[et.full_name] = at
        return at


def _wanted(desc: Any, keep: FieldTree | None, path: str) -> tuple[dict[str, FieldTree | None] | None, set[str]]:
    """The fields of message ``desc`` that ``keep`` keeps (None: all), by name with what is kept
    of each, and those among them kept only as siblings of a kept oneof member (hidden; a
    message one with none of its fields)."""
    if keep is None:
        return None, set()
    wanted = kept(keep, [fd.name for fd in desc.fields if fd.type != _GROUP], path)
    hidden: set[str] = set()
    for fd in desc.fields:
        oneof = fd.containing_oneof
        if fd.name not in wanted or oneof is None or len(oneof.fields) < 2:
            continue
        for sibling in oneof.fields:
            if sibling.name not in wanted and sibling.name not in hidden:
                hidden.add(sibling.name)
    for name in hidden:
        sibling = desc.fields_by_name[name]
        mt = sibling.message_type if sibling.type == _MESSAGE else None
        plain = mt is not None and not _well_known(mt.full_name) and mt.full_name != "google.protobuf.Any"
        wanted[name] = () if plain else None
    return wanted, hidden


def _well_known(name: str) -> bool:
    return name in _WRAPPERS or name in ("google.protobuf.Timestamp", "google.protobuf.Duration")
