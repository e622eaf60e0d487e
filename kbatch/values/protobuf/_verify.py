"""The verifier of Protobuf kernel programs: every program :class:`ProtoProgram` builds is checked
here once, before :mod:`._protokernel` may run it; the kernel then trusts it (CPython's ``_sre``
``_validate`` is the model: check once, then trust).

What the kernel takes (``_protokernel.pyx``)::

    msgs     MSG_WORDS per message:  struct column, first field, field count, dense table start,
                                     dense table length, subtree, (unused)
    fields   FIELD_WORDS per field:  number, type, column, item column, flags, child message or
                                     enum table, wrapped type or default, oneof siblings start,
                                     oneof sibling count, subtree
    aux      int32 words: dense field-number tables, subtree lists (count, columns...), oneof
             sibling lists (field indexes), enum tables (count, prefix offset, prefix length, then
             number, name offset, name length per value), proto2 defaults (two words)
    consts   bytes: enum names and their unknown-value prefix, string defaults
    coldesc  4 words per column: kind, width, parent, nullable (pre-order, the root first)

The safety argument. The kernel reads a record tag by tag; each tag's field is found through its
message's dense table or by a scan of the message's field range, and everything it then touches
is an operand checked here:

1. *Every index is in range.* Message columns, field columns and item columns index ``coldesc``;
   child messages index ``msgs``; field ranges lie inside ``fields``; dense tables, subtree lists,
   oneof sibling lists, enum tables and defaults lie inside ``aux``; every (offset, length) a
   table names lies inside ``consts`` (an enum's unknown-value prefix at most 64 bytes, the room
   ``_put_digits`` has). So no read or write of the kernel leaves its arrays.
2. *Every write fits its column.* The kernel writes a field's values with a store chosen by the
   field's type: 8-byte and 4-byte values into ``FIXEDW`` columns of that width, bits into
   ``BOOL``, bytes into ``BIN`` (enum names too), a message into the ``STRUCT`` column of its
   child message; a repeated field appends to the item column of a ``LIST`` column and closes
   that list; a wrapper writes its wrapped type's kind. A column of another kind or width would
   be written through the wrong buffer (``vals`` sized for another width, ``offs`` absent).
   A proto2 default or an emitted zero (``F_DEFAULT``, ``F_EMIT``) is only on singular scalars,
   whose column is one slot; a wrapped type is only a scalar the kernel can store.
3. *Every record writes each slot once.* A message occurrence appends one slot to its struct
   column; its fields then fill that row: a singular field's column (a child of the struct, the
   field's ``column`` and ``item column`` one and the same) is rewound to the row before it is
   written again, and when the message ends every field not written gets its null (over its
   whole subtree, the list checked here to be exactly the column and the columns under it
   through structs), its default or its zero; a repeated field's list column gets one offset.
   This keeps every column's length equal to its parent's (a struct's) or to its parent's last
   offset (a list's) only if every child of a struct column is the column of exactly one field
   of that struct's message, every list column has exactly one child, the item column of the
   one field that owns the list, and no other column has children. All checked here, with each
   message's struct column distinct, message 0's the root (column 0), and every struct column
   some message's; a child message's struct column is the field's own column, so the message
   graph follows the column tree (a finite tree: parents precede children) and recursion ends.
4. *The dense tables and oneofs stay inside their message.* A dense entry is -1 or a field of
   the same message whose number is the entry's index (and every field numbered below the
   table's length is in it); a oneof sibling is another singular field of the same message, so
   rewinding it rewinds a column of the same row. Field numbers are distinct in a message and in
   ``1 .. 2**29 - 1``; a type is one the kernel knows (groups are never compiled).

Fields outside every message's range are never reached and are not checked. A program that
breaks any rule is refused with :class:`ProgramError` naming the message or field (its index,
and its path when given) and the operand: a bug of the compiler, never of the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import ProgramError
from ._protokernel import FLAGS, KINDS, TYPES, WORDS

__all__ = ["verify_proto"]

MSG_WORDS, FIELD_WORDS = WORDS["MSG"], WORDS["FIELD"]
_NULLT, _BOOL, _FIXEDW, _BIN, _LIST, _STRUCT = (KINDS[k] for k in ("NULLT", "BOOL", "FIXEDW", "BIN", "LIST", "STRUCT"))
_REPEATED, _EMIT, _DEFAULT, _MAP = FLAGS["REPEATED"], FLAGS["EMIT"], FLAGS["DEFAULT"], FLAGS["MAP"]
_ALL_FLAGS = sum(FLAGS.values())
_MAX_NUMBER = (1 << 29) - 1
_MAX_PREFIX = 64  # _put_digits copies at most 64 bytes of an enum's prefix
# type -> (kind, width) of the column its values are stored in (width 0: not a FIXEDW column)
_COLUMN_OF: dict[int, tuple[int, int]] = {
    **{TYPES[t]: (_FIXEDW, 8) for t in ("DOUBLE", "INT64", "UINT64", "FIXED64", "SFIXED64", "SINT64",
                                        "TIMESTAMP", "DURATION")},
    **{TYPES[t]: (_FIXEDW, 4) for t in ("FLOAT", "INT32", "UINT32", "FIXED32", "SFIXED32", "SINT32", "ENUM_INT")},
    TYPES["BOOL"]: (_BOOL, 0), TYPES["STRING"]: (_BIN, 0), TYPES["BYTES"]: (_BIN, 0), TYPES["ENUM"]: (_BIN, 0),
    TYPES["MESSAGE"]: (_STRUCT, 0),
}
_WRAPPED = {TYPES[t] for t in ("DOUBLE", "FLOAT", "INT64", "UINT64", "INT32", "UINT32", "BOOL", "STRING", "BYTES")}
_NOT_SCALAR = {TYPES[t] for t in ("MESSAGE", "TIMESTAMP", "DURATION", "WRAPPER")}
_STRINGS = {TYPES["STRING"], TYPES["BYTES"]}


def verify_proto(msgs: Any, fields: Any, aux: Any, consts: Any, coldesc: Any,
                 paths: Sequence[str] | None = None) -> None:
    """Check a Protobuf kernel program (the arrays :meth:`ProtoProgram.arrays` hands to the
    kernel) against the rules of this module.

    Parameters
    ----------
    msgs, fields, aux, consts, coldesc : array-like
        The program, as ``_protokernel.run`` takes it.
    paths : sequence of str, optional
        Each field's path, to name it in an error.

    Raises
    ------
    ProgramError
        The first rule broken, naming the message or field and the operand.
    """
    _Verifier(list(map(int, msgs)), list(map(int, fields)), list(map(int, aux)), len(consts),
              list(map(int, coldesc)), paths).run()


class _Verifier:
    def __init__(self, msgs: list[int], fields: list[int], aux: list[int], nconsts: int, coldesc: list[int],
                 paths: Sequence[str] | None) -> None:
        self.msgs, self.fields, self.aux, self.nconsts = msgs, fields, aux, nconsts
        self.paths = paths
        if len(msgs) % MSG_WORDS or not msgs:
            raise ProgramError(f"the message table has {len(msgs)} words: not a positive multiple of {MSG_WORDS}")
        if len(fields) % FIELD_WORDS:
            raise ProgramError(f"the field table has {len(fields)} words: not a multiple of {FIELD_WORDS}")
        if len(coldesc) % 4 or not coldesc:
            raise ProgramError(f"the column table has {len(coldesc)} words: not a positive multiple of 4")
        self.nmsgs, self.nfields, self.ncols = len(msgs) // MSG_WORDS, len(fields) // FIELD_WORDS, len(coldesc) // 4
        self.kind = coldesc[0::4]
        self.width = coldesc[1::4]
        self.parent = coldesc[2::4]
        self.children: list[list[int]] = [[] for _ in range(self.ncols)]

    # ------------------------------------------------------------ helpers

    def field_name(self, fi: int) -> str:
        path = f" ({self.paths[fi]})" if self.paths is not None and 0 <= fi < len(self.paths) else ""
        return f"field {fi}{path}"

    def aux_range(self, who: str, operand: str, start: int, count: int) -> None:
        if count < 0 or start < 0 or start + count > len(self.aux):
            raise ProgramError(f"{who}: {operand} aux[{start}:{start + count}] lies outside aux "
                               f"({len(self.aux)} words)")

    def consts_range(self, who: str, operand: str, start: int, size: int) -> None:
        if size < 0 or start < 0 or start + size > self.nconsts:
            raise ProgramError(f"{who}: {operand} consts[{start}:{start + size}] lies outside consts "
                               f"({self.nconsts} bytes)")

    def column(self, who: str, operand: str, col: int) -> int:
        if not 0 <= col < self.ncols:
            raise ProgramError(f"{who}: {operand} column {col} is out of range (0..{self.ncols - 1})")
        return col

    def subtree(self, col: int) -> list[int]:
        out = [col]
        if self.kind[col] == _STRUCT:
            for child in self.children[col]:
                out += self.subtree(child)
        return out

    def subtree_list(self, who: str, at: int, col: int) -> None:
        self.aux_range(who, "subtree list", at, 1)
        self.aux_range(who, "subtree list", at + 1, self.aux[at])
        listed = self.aux[at + 1:at + 1 + self.aux[at]]
        if listed != self.subtree(col):
            raise ProgramError(f"{who}: subtree list at aux[{at}] {listed} is not column {col} and the columns "
                               f"under it through structs {self.subtree(col)}")

    # ------------------------------------------------------------ the rules

    def run(self) -> None:
        self.columns()
        struct_of: dict[int, int] = {}
        for mi in range(self.nmsgs):
            col = self.column(f"message {mi}", "struct", self.msgs[MSG_WORDS * mi])
            if self.kind[col] != _STRUCT:
                raise ProgramError(f"message {mi}: struct column {col} is of kind {self.kind[col]}, not STRUCT")
            if col in struct_of:
                raise ProgramError(f"message {mi}: struct column {col} is message {struct_of[col]}'s too")
            struct_of[col] = mi
        if self.msgs[0] != 0:
            raise ProgramError(f"message 0: struct column {self.msgs[0]} is not the root column 0")
        for col in range(self.ncols):
            if self.kind[col] == _STRUCT and col not in struct_of:
                raise ProgramError(f"column {col}: a STRUCT column that is no message's")
        for mi in range(self.nmsgs):
            self.message(mi)

    def columns(self) -> None:
        for c in range(self.ncols):
            kind, width, parent = self.kind[c], self.width[c], self.parent[c]
            if kind not in (_BOOL, _FIXEDW, _BIN, _LIST, _STRUCT):
                raise ProgramError(f"column {c}: kind {kind} is not one a Protobuf field writes")
            if kind == _FIXEDW and width not in (4, 8):
                raise ProgramError(f"column {c}: FIXEDW width {width} is neither 4 nor 8")
            if c == 0:
                if parent != -1:
                    raise ProgramError(f"column 0: the root has parent {parent}, not -1")
                continue
            if not 0 <= parent < c:
                raise ProgramError(f"column {c}: parent {parent} is not an earlier column (pre-order)")
            if self.kind[parent] not in (_LIST, _STRUCT):
                raise ProgramError(f"column {c}: parent {parent} is of kind {self.kind[parent]}, which has "
                                   f"no children")
            self.children[parent].append(c)
        for c in range(self.ncols):
            if self.kind[c] == _LIST and len(self.children[c]) != 1:
                raise ProgramError(f"column {c}: a LIST column with {len(self.children[c])} children, not 1")

    def message(self, mi: int) -> None:
        who = f"message {mi}"
        col, first, count, dense, dense_len, sub = self.msgs[MSG_WORDS * mi:MSG_WORDS * mi + 6]
        if count < 0 or first < 0 or first + count > self.nfields:
            raise ProgramError(f"{who}: fields [{first}, {first + count}) lie outside the field table "
                               f"({self.nfields} fields)")
        self.aux_range(who, "dense table", dense, dense_len)
        mine = range(first, first + count)
        owner: dict[int, int] = {}
        numbers: dict[int, int] = {}
        for fi in mine:
            own = self.field(fi, mi, col, mine)
            if own in owner:
                raise ProgramError(f"{self.field_name(fi)}: column {own} is written by {self.field_name(owner[own])} "
                                   f"of the same message too")
            owner[own] = fi
            number = self.fields[FIELD_WORDS * fi]
            if number in numbers:
                raise ProgramError(f"{self.field_name(fi)}: number {number} is {self.field_name(numbers[number])}'s "
                                   f"too")
            numbers[number] = fi
            if number < dense_len and self.aux[dense + number] != fi:
                raise ProgramError(f"{self.field_name(fi)}: number {number} has dense entry "
                                   f"{self.aux[dense + number]} in {who}'s table, not {fi}")
        unowned = sorted(set(self.children[col]) - set(owner))
        if unowned:
            raise ProgramError(f"{who}: column {unowned[0]} under its struct column {col} is written by none of "
                               f"its fields")
        self.subtree_list(who, sub, col)
        for number in range(dense_len):
            fi = self.aux[dense + number]
            if fi != -1 and (fi not in mine or self.fields[FIELD_WORDS * fi] != number):
                raise ProgramError(f"{who}: dense entry {number} (aux[{dense + number}]) is {fi}, not -1 nor a "
                                   f"field of this message numbered {number}")

    def field(self, fi: int, mi: int, struct: int, mine: range) -> int:
        """Check field ``fi`` of message ``mi``; returns the column it owns under ``struct``."""
        who = self.field_name(fi)
        number, t, col, item, flags, child, inner, one_at, one_count, sub = \
            self.fields[FIELD_WORDS * fi:FIELD_WORDS * (fi + 1)]
        if not 1 <= number <= _MAX_NUMBER:
            raise ProgramError(f"{who}: number {number} is outside 1..{_MAX_NUMBER}")
        if flags & ~_ALL_FLAGS or flags < 0:
            raise ProgramError(f"{who}: flags {flags} has bits the kernel does not know")
        self.column(who, "column", col)
        self.column(who, "item", item)
        if self.parent[col] != struct:
            raise ProgramError(f"{who}: column {col} is not a child of its message's struct column {struct}")
        repeated = bool(flags & _REPEATED)
        if flags & _MAP and not (repeated and t == TYPES["MESSAGE"]):
            raise ProgramError(f"{who}: flags {flags}: a map on a field that is not a repeated message")
        if repeated:
            if self.kind[col] != _LIST or self.children[col] != [item]:
                raise ProgramError(f"{who}: a repeated field's column {col} is not a LIST whose one child is its "
                                   f"item column {item}")
            if flags & (_EMIT | _DEFAULT):
                raise ProgramError(f"{who}: flags {flags}: a default or an emitted zero on a repeated field")
        else:
            if item != col:
                raise ProgramError(f"{who}: a singular field's item column {item} is not its column {col}")
            self.subtree_list(who, sub, col)
            if flags & (_EMIT | _DEFAULT) and t in _NOT_SCALAR:
                raise ProgramError(f"{who}: flags {flags}: a default or an emitted zero on type {t}, not a scalar")
        stored = inner if t == TYPES["WRAPPER"] else t
        if t == TYPES["WRAPPER"] and inner not in _WRAPPED:
            raise ProgramError(f"{who}: wrapped type {inner} is not a scalar a wrapper holds")
        if stored not in _COLUMN_OF:
            raise ProgramError(f"{who}: type {t} is not one the kernel decodes")
        kind, width = _COLUMN_OF[stored]
        if self.kind[item] != kind or (kind == _FIXEDW and self.width[item] != width):
            raise ProgramError(f"{who}: type {stored} writes kind {kind} width {width}, but item column {item} is "
                               f"kind {self.kind[item]} width {self.width[item]}")
        if t == TYPES["MESSAGE"]:
            if not 0 <= child < self.nmsgs:
                raise ProgramError(f"{who}: child message {child} is out of range (0..{self.nmsgs - 1})")
            if self.msgs[MSG_WORDS * child] != item:
                raise ProgramError(f"{who}: child message {child}'s struct column {self.msgs[MSG_WORDS * child]} "
                                   f"is not the field's item column {item}")
        if t == TYPES["ENUM"]:
            self.enum(who, child)
        if flags & _DEFAULT:
            self.aux_range(who, "default", inner, 2)
            if t in _STRINGS:
                self.consts_range(who, "default", self.aux[inner], self.aux[inner + 1])
        if one_count:
            self.aux_range(who, "oneof siblings", one_at, one_count)
            for g in self.aux[one_at:one_at + one_count]:
                if g not in mine or g == fi or self.fields[FIELD_WORDS * g + 4] & _REPEATED:
                    raise ProgramError(f"{who}: oneof sibling {g} is not another singular field of its message")
        elif one_count < 0:
            raise ProgramError(f"{who}: oneof sibling count {one_count} is negative")
        return col

    def enum(self, who: str, at: int) -> None:
        self.aux_range(who, "enum table", at, 3)
        count, prefix, size = self.aux[at:at + 3]
        self.aux_range(who, "enum table", at + 3, 3 * count)
        if size > _MAX_PREFIX:
            raise ProgramError(f"{who}: enum prefix of {size} bytes is longer than {_MAX_PREFIX}")
        self.consts_range(who, "enum prefix", prefix, size)
        for k in range(count):
            self.consts_range(who, f"enum name {k}", self.aux[at + 4 + 3 * k], self.aux[at + 5 + 3 * k])
