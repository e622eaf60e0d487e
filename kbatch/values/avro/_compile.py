"""Avro (writer, reader) schema pairs compiled into programs for the value kernel.

One :class:`AvroProgram` per reader schema holds the reader's column layout
(:class:`~kbatch.values.avro._layout.Layout`) and the code of every writer schema met so far,
each compiled once (:meth:`AvroProgram.add_writer`) by the specification's schema resolution
rules:

- a record's fields are read in the writer's order; a field the reader lacks is skipped; a
  reader field the writer lacks takes its default (its JSON default encoded once as Avro and
  run through the field's own code); one without a default makes the writer unresolvable;
  fields and named types match by name or the reader's aliases;
- int -> long -> float -> double, and string <-> bytes, promote;
- enum symbols map by name; a symbol the reader lacks takes the reader's default, or is an
  error for the record that holds it;
- a writer union's branch is resolved when it is met (an unresolvable branch is an error for
  the records that take it); a reader union takes the writer's type in its first branch that
  matches exactly, else by name, else by promotion (Avro's Java ``bestBranch`` order).
- a map whose key comes again keeps one entry per key, the last value where the key first
  stood (Java's ``GenericDatumReader.readMap`` puts every entry into a map; fastavro reads a
  dict): its ``LOOP`` has ``a = 1``, and the kernel keeps the last entry of each key when the
  map ends.

A writer's values the reader does not keep (a field it lacks, or one a projection leaves out;
a union branch cut at the recursion depth) are skipped: consecutive ones by one ``SKIP``
instruction walking their *skip tree* in ``aux`` (``_skipping.pxi`` in the kernel), recursive
types by ``GOSUB`` subroutines, instruction by instruction.

A writer that cannot be resolved at all compiles to one failing instruction: its records each
get an error, the rest of the table decodes. Instructions are ``(op, a, b, c)``
(``kbatch.values.avro._avrokernel.OPS``); :attr:`AvroProgram.paths` gives each instruction's field
path (``value.items[].price``) for error messages.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import AvroSchemaError
from ._avrokernel import OPS, SKIP_NESTING, SKIP_NODES
from ._layout import STRUCT as STRUCT_KIND
from ._layout import Layout, Slot
from ._schema import NO_DEFAULT, AvroType, parse_avro_schema
from ._verify import verify_avro

__all__ = ["AvroProgram", "encode_default", "folded", "min_size", "skip_nodes"]

END, JUMP, FAIL, UNION, ARRAY, LOOP, CALL, RET, STRUCT, NULLSLOT, GOSUB = (
    OPS[k] for k in ("END", "JUMP", "FAIL", "UNION", "ARRAY", "LOOP", "CALL", "RET", "STRUCT", "NULLSLOT", "GOSUB"))
_PROMOTE = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
            "string": ("bytes",), "bytes": ("string",)}
_MILLIS = ("timestamp-millis", "local-timestamp-millis")
NULLABLE = OPS["NULLABLE"]
SK_VARINT, SK_BYTES, SK_FIXED, SK_UNION, SK_ARRAY, SK_CHOICE = (
    SKIP_NODES[k] for k in ("VARINT", "BYTES", "FIXED", "UNION", "ARRAY", "CHOICE"))
_FIXED_SIZES = {"boolean": 1, "float": 4, "double": 8}
#: A skip tree's nodes before they are written to aux: ``(SK_VARINT,)``, ``(SK_BYTES,)``,
#: ``(SK_FIXED, size)``, ``(SK_UNION, [branch nodes, ...])``, ``(SK_ARRAY, least item size, item nodes)``,
#: ``(SK_CHOICE, [code, ...])`` (a union of at most one VARINT, BYTES or FIXED a branch: 0 nothing,
#: -1 a varint, -2 bytes, k > 0 k bytes).
SkipNodes = list[tuple[Any, ...]]
#: Instructions that read one value into one column (what may follow a NULLABLE).
_ONE_VALUE = frozenset(OPS[k] for k in (
    "LONG", "INT", "STRING", "BYTES", "ENUM", "LONG_MUL", "VARINT_F", "VARINT_D", "DEC_BYTES", "BOOL", "FLOAT",
    "FLOAT_D", "DOUBLE", "FIXED", "UUID_FIXED", "DEC_FIXED", "FIXED_W", "UUID_STR", "DURATION", "TIME"))


class AvroProgram:
    """The reader's columns and the compiled code of each writer schema.

    Parameters
    ----------
    reader : AvroType
        The reader schema (the output's layout).
    mapping : {"spark", "arrow"}
        The type mapping (see :mod:`kbatch.values.avro._layout`).
    max_depth : int, optional
        How deep a recursive record is kept (Spark's ``recursiveFieldMaxDepth``); the deeper
        levels are skipped. None: a recursive reader schema is refused.
    walk_tail : bool, default True
        Walk the writer's fields after the last one the reader keeps of a value that is a
        record. False (a projection): they are left unread, since the value's length ends the
        record (a fault in them goes unreported: what a lazy scan's value filter judges by).
    """

    def __init__(self, reader: AvroType, mapping: str = "spark", max_depth: int | None = None,
                 walk_tail: bool = True) -> None:
        self.reader = reader
        self.walk_tail = walk_tail
        self._root: AvroType | None = None  # the writer being compiled
        self.layout = Layout(reader, mapping, max_depth)
        self.arrow = mapping == "arrow"
        self.code: list[list[int]] = []
        self.paths: list[str] = []
        self.aux: list[int] = []
        self.consts = bytearray()
        self.messages: list[str] = []
        self._path = "value"
        self._subroutines: list[tuple[int, AvroType, Slot, str]] = []
        self._skip_calls: list[tuple[int, AvroType]] = []
        self._entries: dict[Any, int] = {}
        #: Where records may start: the null record's entry and each writer's (verified).
        self.entries: list[int] = []
        self._verified: tuple[int, tuple[Any, ...]] | None = None
        self.null_entry = len(self.code)
        self._null_slots(self.layout.root.col)
        self._op(END)
        self.entries.append(self.null_entry)

    # ------------------------------------------------------------ assembly

    def _op(self, op: int, a: int = 0, b: int = 0, c: int = 0) -> int:
        self.code.append([op, a, b, c])
        self.paths.append(self._path)
        return len(self.code) - 1

    def _mark(self) -> tuple[int, ...]:
        """Where everything the compiler queues stands now (see :meth:`_rollback`)."""
        return (len(self.code), len(self.aux), len(self.consts), len(self.messages), len(self._subroutines),
                len(self._skip_calls))

    def _rollback(self, mark: tuple[int, ...]) -> None:
        """Undo everything emitted or queued since ``mark``: the code and its paths, the aux and
        constant entries, the messages, and the CALLs and GOSUBs waiting to be patched (a queued
        patch outliving its instruction would be written into whatever code comes next there).
        The one rollback of the compiler: a NULLABLE that turns out longer than one instruction,
        and a writer that turns out unresolvable. The queues only grow between a mark and its
        rollback (:meth:`_drain` empties them wholly, after every mark of one writer but its own)."""
        code, aux, consts, messages, subroutines, skip_calls = mark
        del self.code[code:], self.paths[code:], self.aux[aux:], self.consts[consts:], self.messages[messages:]
        del self._subroutines[subroutines:], self._skip_calls[skip_calls:]

    def _fail(self, message: str) -> None:
        self.messages.append(message)
        self._op(FAIL, len(self.messages) - 1)

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.uint8],
                              npt.NDArray[np.int32]]:
        """``(program, aux, consts, coldesc)`` as the kernel takes them (read-only), verified
        (:func:`~kbatch.values.avro._verify.verify_avro`) once per version of the program (the code
        only grows, by :meth:`add_writer` and :meth:`add_failure`): the only way to the kernel.

        Raises
        ------
        ProgramError
            When the verifier refuses the program (a bug of this compiler).
        """
        if self._verified is None or self._verified[0] != len(self.code):
            program = np.asarray(self.code, dtype=np.int32).reshape(-1)
            aux = np.asarray(self.aux or [0], dtype=np.int32)
            consts = np.frombuffer(bytes(self.consts) or b"\0", dtype=np.uint8)
            coldesc = np.asarray(self.layout.coldesc(), dtype=np.int32)
            for array in (program, aux, coldesc):
                array.setflags(write=False)  # (consts: a view of bytes, read-only already)
            verify_avro(program, aux, consts, coldesc, self.entries, len(self.messages), self.paths)
            self._verified = (len(self.code), (program, aux, consts, coldesc))
        program, aux, consts, coldesc = self._verified[1]
        return program, aux, consts, coldesc

    def add_writer_schema(self, schema: Any) -> int:
        """:meth:`add_writer` for a registry :class:`~kbatch.values.Schema`, compiled once per
        text (and references); a writer that does not parse compiles to a failure."""
        key = (schema.schema_type, schema.text, tuple((n, s.text) for n, s in schema.dependencies))
        entry = self._entries.get(key)
        if entry is None:
            try:
                writer = parse_avro_schema(schema)
            except AvroSchemaError as exc:
                entry = self.add_failure(f"writer schema {schema.id}: {exc}")
            else:
                entry = self.add_writer(writer)
            self._entries[key] = entry
        return entry

    def add_failure(self, message: str) -> int:
        """An entry whose every record fails with ``message``."""
        entry = len(self.code)
        self._path = "value"
        self._fail(message)
        self._op(END)
        self.entries.append(entry)
        return entry

    def add_writer(self, writer: AvroType) -> int:
        """Compile the code of ``writer`` against the reader; returns its entry instruction."""
        entry = len(self.code)
        mark = self._mark()
        self._path = "value"
        self._root = writer
        try:
            self._emit(writer, self.layout.root, [])
            self._op(END)
            self._drain()
        except AvroSchemaError as exc:
            self._rollback(mark)
            self._path = "value"
            self._fail(str(exc))
            self._op(END)
        self.entries.append(entry)
        return entry

    def _drain(self) -> None:
        while self._subroutines:
            call, t, slot, path = self._subroutines.pop()
            self._path = path
            self.code[call][1] = len(self.code)
            self._emit(t, slot, [])
            self._op(RET)
        # the skipping subroutines of recursive records, one per record (they call themselves)
        entries: dict[int, int] = {}
        while self._skip_calls:
            call, w = self._skip_calls.pop()
            if id(w) not in entries:
                entries[id(w)] = len(self.code)
                self._skip(w, [])
                self._op(RET)
            self.code[call][1] = entries[id(w)]

    # ------------------------------------------------------------ resolution

    def _emit(self, w: AvroType, s: Slot, stack: list[str]) -> None:
        """Code that reads a ``w`` (the writer's type) into reader slot ``s``."""
        if w.kind == "union":
            self._union(w, s, stack)
            return
        r = s.type
        if s.form == "nullable":
            assert s.target is not None
            k = best_branch(w, r)
            if k < 0:
                self._fail(f"writer type {_describe(w)} matches no branch of the reader's union")
            elif r.branches[k].kind == "null" and s.target.type.kind != "null":
                self._null_slots(s.col)
            else:
                self._emit(w, s.target, stack)
            return
        if s.form == "members":
            k = best_branch(w, r)
            if k < 0:
                self._fail(f"writer type {_describe(w)} matches no branch of the reader's union")
            elif r.branches[k].kind == "null":
                self._null_slots(s.col)
            else:
                self._struct(s.col)
                for member, branch in zip(s.members, s.member_branch, strict=True):
                    if branch != k:
                        self._null_slots(member.col)
                if k in s.member_branch:
                    self._emit(w, s.members[s.member_branch.index(k)], stack)
                else:  # a branch cut at the recursion depth: its bytes skipped
                    self._skip(w, stack)
            return
        if r.kind == "record":
            self._record(w, s, stack)
        elif r.kind in ("array", "map"):
            if w.kind != r.kind:
                self._fail(f"writer type {_describe(w)} is not an {r.kind}")
                return
            assert s.item is not None
            witem = w.items if w.kind == "array" else w.values
            assert witem is not None
            loop = self._op(ARRAY, s.col, 0, min_size(witem) + (1 if r.kind == "map" else 0))  # + the key
            path = self._path
            self._path = path + "[]"
            if r.kind == "map":
                self._struct(s.entries_col)
                self._op(OPS["STRING"], s.key_col)
            self._emit(witem, s.item, stack)
            self._path = path
            self._op(LOOP, 1 if r.kind == "map" else 0)  # a map's: one entry per key, the last value
            self.code[loop][2] = len(self.code)
        else:
            self._leaf(w, s)

    def _union(self, w: AvroType, s: Slot, stack: list[str]) -> None:
        if self._nullable(w, s, stack):
            return
        self._branches(w, lambda branch: self._emit(branch, s, stack))

    def _branches(self, w: AvroType, each: Callable[[AvroType], None]) -> None:
        """A UNION instruction over ``w``'s branches: a jump table in ``aux`` to each branch's
        code (``each(branch)`` emits it), every branch ending in a JUMP past the last."""
        n = len(w.branches)
        table = len(self.aux)
        self.aux.extend([0] * n)
        self._op(UNION, n, table)
        jumps = []
        for i, branch in enumerate(w.branches):
            self.aux[table + i] = len(self.code)
            each(branch)
            jumps.append(self._op(JUMP))
        for j in jumps:
            self.code[j][1] = len(self.code)

    def _nullable(self, w: AvroType, s: Slot, stack: list[str]) -> bool:
        """A writer ``["null", T]`` into a nullable leaf column as one NULLABLE instruction
        followed by T's one instruction (three fewer dispatches than the general union)."""
        kinds = [b.kind for b in w.branches]
        if len(kinds) != 2 or "null" not in kinds or s.form != "nullable" or s.target is None:
            return False
        null = kinds.index("null")
        col = s.target.col
        if self.layout.subtree(col) != [col] or s.target.type.kind == "null" or not self.layout.columns[col].nullable:
            return False
        k = best_branch(w.branches[null], s.type)
        if k < 0 or s.type.branches[k].kind != "null":
            return False
        mark = self._mark()
        start = len(self.code)
        self._op(NULLABLE, null, col)
        self._emit(w.branches[1 - null], s, stack)
        if len(self.code) - start == 2 and self.code[start + 1][0] in _ONE_VALUE:
            return True
        self._rollback(mark)  # more than one instruction: the general union
        return False

    def _null_slots(self, col: int) -> None:
        for c in self.layout.subtree(col):
            if not folded(self.layout, c):
                self._op(NULLSLOT, c)

    def _struct(self, col: int) -> None:
        """A slot of struct column ``col``: a STRUCT instruction, none for a folded struct."""
        if not folded(self.layout, col):
            self._op(STRUCT, col)

    def _record(self, w: AvroType, s: Slot, stack: list[str]) -> None:
        r = s.type
        if w.kind != "record" or not names_match(w, r):
            self._fail(f"writer type {_describe(w)} is not the reader's record {r.name}")
            return
        assert w.name is not None
        # no recursion check: the reader's slots are finite (a recursive reader is cut at
        # max_depth by the layout), and the writer is followed only as deep as they go
        self._struct(s.col)
        path = self._path
        matched: set[str] = set()
        skipped: list[tuple[str, AvroType]] = []  # a run of writer fields the reader does not keep
        for wf in w.fields:
            rf = next((f for f in r.fields if f.name == wf.name), None) or \
                next((f for f in r.fields if wf.name in f.aliases and f.name not in matched), None)
            if rf is None or rf.name not in s.fields:  # not in the reader, or cut at the recursion depth
                if rf is not None:
                    matched.add(rf.name)
                skipped.append((wf.name, wf.type))
            else:
                self._skip_run(skipped, path, [*stack, w.name])
                skipped = []
                matched.add(rf.name)
                self._path = f"{path}.{wf.name}"
                self._emit(wf.type, s.fields[rf.name], [*stack, w.name])
        if self.walk_tail or w is not self._root or stack:  # (the value itself: its end is the record's)
            self._skip_run(skipped, path, [*stack, w.name])
        for rf in r.fields:
            if rf.name in matched or rf.name not in s.fields:
                continue
            self._path = f"{path}.{rf.name}"
            if rf.default is NO_DEFAULT:
                raise AvroSchemaError(f"the reader's field {self._path} has no default and the writer lacks it")
            data = encode_default(rf.type, rf.default)
            call = self._op(CALL, 0, len(self.consts), len(data))
            self.consts += data
            self._subroutines.append((call, rf.type, s.fields[rf.name], self._path))
        self._path = path

    def _leaf(self, w: AvroType, s: Slot) -> None:
        r = s.type
        col = s.col
        rk, wk, logical = r.kind, w.kind, r.logical
        op = None
        if rk in ("enum", "fixed"):
            if wk != rk or not names_match(w, r) or (rk == "fixed" and w.size != r.size):
                self._fail(f"writer type {_describe(w)} does not match the reader's {rk} {r.name}")
                return
            if rk == "enum":
                self._enum(w, r, col)
                return
            if logical == "decimal":
                self._op(OPS["DEC_FIXED"], col, r.size, r.precision)
            elif self.arrow and logical == "duration":
                self._op(OPS["DURATION"], col, r.size)
            elif self.arrow and r.size > 0:  # fixed_size_binary, uuid included
                self._op(OPS["FIXED_W"], col, r.size)
            elif logical == "uuid":
                self._op(OPS["UUID_FIXED"], col, r.size)
            else:
                self._op(OPS["FIXED"], col, r.size)
            return
        if rk == "null" and wk == "null":
            op = "NULLV"
        elif rk == "boolean" and wk == "boolean":
            op = "BOOL"
        elif rk == "int" and wk == "int":
            if self.arrow and logical == "time-millis":  # time32: checked to be a time of day
                self._op(OPS["TIME"], col, 0)
                return
            op = "INT"
        elif rk == "long" and wk in ("int", "long"):
            if self.arrow and logical == "time-micros":  # time64
                self._op(OPS["TIME"], col, 1)
                return
            if logical in _MILLIS and not self.arrow:  # Spark's microseconds
                self._op(OPS["LONG_MUL"], col, 1000)
                return
            op = "LONG"
        elif rk in ("float", "double") and wk in ("int", "long"):
            op = "VARINT_F" if rk == "float" else "VARINT_D"
        elif rk == "float" and wk == "float":
            op = "FLOAT"
        elif rk == "double" and wk in ("float", "double"):
            op = "FLOAT_D" if wk == "float" else "DOUBLE"
        elif rk == "string" and wk in ("string", "bytes"):
            op = "UUID_STR" if self.arrow and logical == "uuid" else "STRING"
        elif rk == "bytes" and wk in ("string", "bytes"):
            if logical == "decimal":
                self._op(OPS["DEC_BYTES"], col, 0, r.precision)
                return
            op = "BYTES"
        if op is None:
            self._fail(f"writer type {_describe(w)} cannot be read as {_describe(r)}")
            return
        self._op(OPS[op], col)

    def _enum(self, w: AvroType, r: AvroType, col: int) -> None:
        table = len(self.aux)
        for symbol in w.symbols:
            name = symbol if symbol in r.symbols else r.default_symbol
            if name is None:
                self.aux += [-1, -1]
            else:
                data = name.encode()
                self.aux += [len(self.consts), len(data)]
                self.consts += data
        self._op(OPS["ENUM"], col, table, len(w.symbols))

    def _skip_run(self, fields: list[tuple[str, AvroType]], path: str, stack: list[str]) -> None:
        """Skip a run of a record's fields (``(name, type)``, the record at ``path``): one SKIP
        for them all when none is recursive (its error path: the field, or the record for
        several), else each by :meth:`_skip`."""
        if not fields:
            return
        nodes = skip_nodes([t for _, t in fields], stack)
        if nodes is not None:
            self._path = f"{path}.{fields[0][0]}" if len(fields) == 1 else path
            if nodes:
                self._op(OPS["SKIP"], self._skip_tree(nodes))
            return
        for name, t in fields:
            self._path = f"{path}.{name}"
            self._skip(t, stack)

    def _skip_tree(self, nodes: SkipNodes) -> int:
        """Write a skip sequence to ``aux`` (what it refers to after it); returns where."""
        at = len(self.aux)
        self.aux += [len(nodes)] + [0] * (3 * len(nodes))
        for i, node in enumerate(nodes):
            base = at + 1 + 3 * i
            self.aux[base] = node[0]
            if node[0] == SK_FIXED:
                self.aux[base + 1] = node[1]
            elif node[0] == SK_CHOICE:
                self.aux[base + 1], self.aux[base + 2] = len(node[1]), len(self.aux)
                self.aux += node[1]
            elif node[0] == SK_UNION:
                table = len(self.aux)
                self.aux += [0] * len(node[1])
                self.aux[base + 1], self.aux[base + 2] = len(node[1]), table
                for k, branch in enumerate(node[1]):
                    self.aux[table + k] = self._skip_tree(branch)
            elif node[0] == SK_ARRAY:
                self.aux[base + 1] = node[1]
                self.aux[base + 2] = self._skip_tree(node[2])
        return at

    def _skip(self, w: AvroType, stack: list[str]) -> None:
        nodes = skip_nodes([w], stack)
        if nodes is not None:  # no recursive record in it: one SKIP
            if nodes:
                self._op(OPS["SKIP"], self._skip_tree(nodes))
            return
        kind = w.kind
        if kind == "null" or (kind == "fixed" and w.size == 0):
            return
        if kind in ("int", "long", "enum"):
            self._op(OPS["SKIP_VARINT"])
        elif kind in ("bytes", "string"):
            self._op(OPS["SKIP_BYTES"])
        elif kind in ("boolean", "float", "double", "fixed"):
            self._op(OPS["SKIP_N"], {"boolean": 1, "float": 4, "double": 8}.get(kind, w.size))
        elif kind == "record":
            assert w.name is not None
            if w.name in stack:  # a recursive record: a subroutine that calls itself
                self._skip_calls.append((self._op(GOSUB), w))
                return
            path = self._path
            self._skip_run([(f.name, f.type) for f in w.fields], path, [*stack, w.name])
            self._path = path
        elif kind in ("array", "map"):
            item = w.items if kind == "array" else w.values
            assert item is not None
            loop = self._op(ARRAY, -1, 0, min_size(item) + (1 if kind == "map" else 0))
            if kind == "map":
                self._op(OPS["SKIP_BYTES"])
            self._skip(item, stack)
            self._op(LOOP)
            self.code[loop][2] = len(self.code)
        elif kind == "union":
            self._branches(w, lambda branch: self._skip(branch, stack))
        else:  # pragma: no cover - every kind is above
            raise AvroSchemaError(f"cannot skip {kind!r}")


def skip_nodes(types: list[AvroType], stack: list[str], nesting: int = 0) -> SkipNodes | None:
    """The skip tree of values of ``types`` one after the other (records inlined, consecutive
    fixed sizes merged); None when one holds a recursive record (a name in ``stack``, the
    records around it) or unions and arrays nest deeper than the kernel's ``SKIP_NESTING``."""
    out: SkipNodes = []
    for t in types:
        kind = t.kind
        if kind == "null" or (kind == "fixed" and t.size == 0):
            continue
        if kind in ("int", "long", "enum"):
            out.append((SK_VARINT,))
        elif kind in ("bytes", "string"):
            out.append((SK_BYTES,))
        elif kind in _FIXED_SIZES or kind == "fixed":
            size = _FIXED_SIZES.get(kind, t.size)
            if out and out[-1][0] == SK_FIXED and out[-1][1] + size < 1 << 31:
                out[-1] = (SK_FIXED, out[-1][1] + size)
            else:
                out.append((SK_FIXED, size))
        elif kind == "record":
            assert t.name is not None
            inner = None if t.name in stack else skip_nodes([f.type for f in t.fields], [*stack, t.name], nesting)
            if inner is None:
                return None
            if inner and out and inner[0][0] == SK_FIXED == out[-1][0] and out[-1][1] + inner[0][1] < 1 << 31:
                out[-1] = (SK_FIXED, out[-1][1] + inner[0][1])
                inner = inner[1:]
            out += inner
        elif nesting >= SKIP_NESTING:
            return None
        elif kind in ("array", "map"):
            item = t.items if kind == "array" else t.values
            assert item is not None
            inner = skip_nodes([AvroType("string"), item] if kind == "map" else [item], stack, nesting + 1)
            if inner is None:
                return None
            out.append((SK_ARRAY, min_size(item) + (1 if kind == "map" else 0), inner))
        elif kind == "union":
            branches = [skip_nodes([b], stack, nesting + 1) for b in t.branches]
            if any(b is None for b in branches):
                return None
            if all(not b or (len(b) == 1 and b[0][0] in (SK_VARINT, SK_BYTES, SK_FIXED)) for b in branches):
                out.append((SK_CHOICE, [0 if not b else -1 if b[0][0] == SK_VARINT else -2 if b[0][0] == SK_BYTES
                                        else b[0][1] for b in branches]))
            else:
                out.append((SK_UNION, branches))
        else:  # pragma: no cover - every kind is above
            raise AvroSchemaError(f"cannot skip {kind!r}")
    return out


def folded(layout: Layout, col: int) -> bool:
    """Whether column ``col`` is a folded struct: one without validity and with children takes
    no instruction (no STRUCT, no NULLSLOT); it has as many slots as its first child, which the
    kernel sets when the records are done (the same rule as its ``_folded``)."""
    c = layout.columns[col]
    return c.kind == STRUCT_KIND and not c.nullable and bool(c.children)


def names_match(w: AvroType, r: AvroType) -> bool:
    """Whether writer and reader named types match: the same unqualified name, or a reader alias
    naming the writer's."""
    if w.short_name == r.short_name:
        return True
    return w.name in r.aliases or any(a.rsplit(".", 1)[-1] == w.short_name for a in r.aliases)


def best_branch(w: AvroType, r: AvroType) -> int:
    """The reader union branch a writer type goes to: the first of the same kind (and full name),
    else the first named type matching by name or alias, else the first it promotes to; -1."""
    branches = r.branches
    for i, b in enumerate(branches):
        if b.kind == w.kind and (b.name is None or b.name == w.name):
            return i
    for i, b in enumerate(branches):
        if b.kind == w.kind and b.name is not None and names_match(w, b):
            return i
    for i, b in enumerate(branches):
        if b.kind in _PROMOTE.get(w.kind, ()):
            return i
    return -1


def min_size(t: AvroType, seen: frozenset[str] = frozenset()) -> int:
    """The fewest bytes a value of ``t`` is written in (what bounds an item count), at most
    2**30 (an int32 operand, a map's key byte added; a smaller bound is still a bound)."""
    return min(_min_size(t, seen), 1 << 30)


def _min_size(t: AvroType, seen: frozenset[str]) -> int:
    kind = t.kind
    if kind == "null":
        return 0
    if kind == "float":
        return 4
    if kind == "double":
        return 8
    if kind == "fixed":
        return t.size
    if kind == "record":
        if t.name in seen:
            return 1
        inner = seen | {t.name or ""}
        return sum(_min_size(f.type, inner) for f in t.fields)
    return 1


def _describe(t: AvroType) -> str:
    return t.name or t.kind


# ---------------------------------------------------------------- defaults

def encode_default(t: AvroType, value: Any) -> bytes:
    """A field's JSON default encoded as Avro binary of ``t`` (a union's default: its first
    branch that takes it)."""
    out = bytearray()
    try:
        _encode(t, value, out)
    except (TypeError, ValueError, OverflowError, KeyError) as exc:
        raise AvroSchemaError(f"default {json.dumps(value)[:60]} is not a valid {_describe(t)}: {exc}") from None
    return bytes(out)


def _zigzag(n: int, out: bytearray) -> None:
    if not -(1 << 63) <= n < (1 << 63):
        raise OverflowError("out of the long range")
    v = (n << 1) ^ (n >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _encode(t: AvroType, v: Any, out: bytearray) -> None:
    kind = t.kind
    if kind == "union":
        for i, branch in enumerate(t.branches):
            trial = bytearray()
            try:
                _encode(branch, v, trial)
            except (TypeError, ValueError, OverflowError, KeyError):
                continue
            _zigzag(i, out)
            out += trial
            return
        raise ValueError("matches no branch")
    if kind == "null":
        if v is not None:
            raise ValueError("not null")
    elif kind == "boolean":
        if not isinstance(v, bool):
            raise TypeError("not a boolean")
        out.append(int(v))
    elif kind in ("int", "long"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("not an integer")
        if kind == "int" and not -(1 << 31) <= v < (1 << 31):
            raise OverflowError("out of the int range")
        _zigzag(v, out)
    elif kind in ("float", "double"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError("not a number")
        if kind == "float" and math.isfinite(v) and abs(v) > 3.5e38:
            raise OverflowError("out of the float range")
        out += struct.pack("<f" if kind == "float" else "<d", v)
    elif kind in ("bytes", "string", "fixed"):
        if not isinstance(v, str):
            raise TypeError("not a string")
        data = v.encode("utf-8") if kind == "string" else v.encode("latin-1")
        if kind == "fixed":
            if len(data) != t.size:
                raise ValueError(f"{len(data)} bytes, the fixed has {t.size}")
        else:
            _zigzag(len(data), out)
        out += data
    elif kind == "enum":
        out += b""
        _zigzag(t.symbols.index(v), out)
    elif kind in ("array", "map"):
        if (kind == "array" and not isinstance(v, list)) or (kind == "map" and not isinstance(v, dict)):
            raise TypeError(f"not an {kind}")
        if v:
            _zigzag(len(v), out)
            if kind == "array":
                assert t.items is not None
                for item in v:
                    _encode(t.items, item, out)
            else:
                assert t.values is not None
                for key, item in v.items():
                    _encode(AvroType("string"), key, out)
                    _encode(t.values, item, out)
        out.append(0)
    elif kind == "record":
        if not isinstance(v, dict):
            raise TypeError("not an object")
        for f in t.fields:
            if f.name in v:
                _encode(f.type, v[f.name], out)
            elif f.default is not NO_DEFAULT:
                _encode(f.type, f.default, out)
            else:
                raise KeyError(f.name)
    else:  # pragma: no cover
        raise TypeError(f"no default for {kind}")
