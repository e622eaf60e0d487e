"""The verifier of compiled value programs: checked once, then the kernel trusts the code.

The value kernels (``_avrokernel.pyx``) are C over untrusted bytes. The bytes are checked as they
are read (every length and count against what is left); the *program* is not: the kernel indexes
its column array, ``aux``, the constants, its loop and call stacks and its own code by the
program's operands without a bound. So a program is verified before any kernel may run it, as
CPython's ``_validate`` checks a compiled regular expression before its matcher trusts it
(``Modules/_sre/sre.c``). :func:`verify_avro` refuses a program (:class:`ProgramError`, naming
the instruction's index, its field path and the operand) unless all of this holds:

0. **Columns**: ``coldesc`` in pre-order with the root first, each of a known kind, a fixed width
   of one byte or more, a list's one child right after it (the kernel's ``LOOP`` counts it there).
1. **Operands in range** (a static pass over every instruction, reached or not): the opcode is
   one of ``OPS``; a column operand names a column of ``coldesc`` of the kind (and width) the
   op writes (``STRING`` a binary/string column, ``STRUCT`` a struct column, ``ARRAY`` a list
   column whose child is the next column, or -1 when skipping, ``FIXED_W`` a fixed-width column
   of its size...); no op names a *folded* struct (one the kernel counts from its first child and
   no instruction writes, ``_folded`` in the kernel); an enum's table, a union's jump table, a
   default's constants lie within ``aux`` and ``consts``; every enum symbol's constant too; a
   ``FAIL`` names a message; a size the kernel reads from the data after checking only the
   operand (``UUID_FIXED`` 16 bytes, ``DURATION`` 12) is that size; ``LONG_MUL`` never divides
   by zero; every jump, loop exit, union branch, call and entry is an instruction of the code;
   a ``SKIP``'s skip tree (``_skipping.pxi``) lies within ``aux``, node by node of a known kind,
   a fixed size and a least item size not negative, a union (or a choice: each branch's code -2
   or more) of at least one branch, every sequence a node refers to after the node (so the tree
   is finite), unions and arrays nested at most ``SKIP_NESTING`` deep (the kernel's walk keeps a
   stack that deep).
2. **Structured control flow** (a pass over every path from every entry, each subroutine
   once): every path of an entry ends in ``END`` or ``FAIL`` and never meets ``RET`` (the
   kernel's call stack would underflow); every path of a subroutine ends in ``RET`` or ``FAIL``
   and never meets ``END``; a ``LOOP`` closes the innermost ``ARRAY`` of its own code (the loop
   stack never underflows), whose exit is the instruction after it; nothing runs off the code's
   end; an instruction belongs to one entry or subroutine only (no jump into another's code);
   a ``LOOP`` whose operand marks a map (``a = 1``: the kernel keeps one entry per key when the
   map ends) closes an ``ARRAY`` writing a map's list column: its child a struct whose first
   child, right after it, is a binary column (the keys the kernel hashes and compares);
   a ``CALL``/``GOSUB`` target is the start of a live subroutine (reached, ending in ``RET``);
   only a ``GOSUB`` subroutine may call itself (skipping a recursive type), and then writes no
   column.
3. **Each column written exactly once per slot**: an abstract interpretation of every path
   counts the writes to each column (a value, ``STRUCT``, ``NULLSLOT``, ``NULLV``; a ``CALL``
   adds its subroutine's writes; ``NULLABLE`` writes its column on the null path and runs the
   next instruction on the other). Where paths meet (after a union's branches, a ``NULLABLE``'s
   value, an empty array's exit) their counts must be equal; at ``END`` every column that has
   one slot per record (the root and the columns under it through structs, folded structs left
   out) has been written exactly once and no other; at a ``LOOP`` every column of one item (the
   list's child and the columns under it through structs) exactly once and no other; a skipping
   loop (``ARRAY -1``) writes nothing.

What this gives the kernel: every column pointer ``cols + ins[1]`` is inside the column array
and of the layout the op's code assumes (so its buffers are the ones written: ``offs`` for
binary and list columns, ``width``-byte values); every ``aux``/``consts``/code index is in
bounds; the loop and call stacks never underflow (overflow is checked at run time: 64 deep);
and after each record the columns' lengths agree with their parents' (a struct's children have
its length, a list's child its last offset), which is what the kernel's rollback of a failed
record and the Arrow arrays built from the buffers rely on. A path that stops at ``FAIL`` or at
an error in the data writes what it wrote, and the kernel rolls the record back; the data
decide only which of the verified paths runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._errors import ProgramError
from ._avrokernel import KINDS, OPS, SKIP_NESTING, SKIP_NODES

__all__ = ["verify_avro"]

_NAMES = {v: k for k, v in OPS.items()}
NULLT, BOOL, FIXEDW, BIN, LIST, STRUCT = (KINDS[k] for k in ("NULLT", "BOOL", "FIXEDW", "BIN", "LIST", "STRUCT"))
_KIND_NAMES = {v: k for k, v in KINDS.items()}
#: Ops writing one value to column ``a``: the column kind, and its width (0: any).
_WRITES: dict[int, tuple[int, int]] = {OPS[k]: v for k, v in {
    "LONG": (FIXEDW, 8), "INT": (FIXEDW, 4), "STRING": (BIN, 0), "BYTES": (BIN, 0), "ENUM": (BIN, 0),
    "LONG_MUL": (FIXEDW, 8), "VARINT_F": (FIXEDW, 4), "VARINT_D": (FIXEDW, 8), "DEC_BYTES": (FIXEDW, 16),
    "BOOL": (BOOL, 0), "FLOAT": (FIXEDW, 4), "FLOAT_D": (FIXEDW, 8), "DOUBLE": (FIXEDW, 8), "FIXED": (BIN, 0),
    "UUID_FIXED": (BIN, 0), "DEC_FIXED": (FIXEDW, 16), "FIXED_W": (FIXEDW, 0), "UUID_STR": (FIXEDW, 16),
    "DURATION": (FIXEDW, 16), "TIME": (FIXEDW, 0), "NULLV": (NULLT, 0), "STRUCT": (STRUCT, 0),
}.items()}  # fmt: skip
(END, JUMP, FAIL, UNION, ARRAY, LOOP, CALL, RET, NULLSLOT, GOSUB, NULLABLE, ENUM, SKIP_N, FIXED_W, UUID_FIXED,
 DURATION, TIME, LONG_MUL, DEC_BYTES, DEC_FIXED, FIXED) = (OPS[k] for k in (
    "END", "JUMP", "FAIL", "UNION", "ARRAY", "LOOP", "CALL", "RET", "NULLSLOT", "GOSUB", "NULLABLE", "ENUM",
    "SKIP_N", "FIXED_W", "UUID_FIXED", "DURATION", "TIME", "LONG_MUL", "DEC_BYTES", "DEC_FIXED", "FIXED"))
SKIP = OPS["SKIP"]
SK_FIXED, SK_UNION, SK_ARRAY, SK_CHOICE = (SKIP_NODES[k] for k in ("FIXED", "UNION", "ARRAY", "CHOICE"))
#: Decimal128's digits (the kernel's ``POW10`` table).
_MAX_PRECISION = 38

# An abstract state: the open loops, innermost last, each ``(array_pc, column, writes)`` with
# ``writes`` the columns written in the current item (the outermost frame, ``array_pc`` -1, is
# the record's or the subroutine's own) as a persistent list, newest first: ``(column, rest,
# length)`` or None. A write is O(1); paths that meet share the list up to where they parted,
# so comparing them costs only what each wrote since (:func:`_difference`).
_Writes = tuple[int, Any, int] | None
_Frame = tuple[int, int, _Writes]
_State = tuple[_Frame, ...]


def verify_avro(program: Any, aux: Any, consts: Any, coldesc: Any, entries: Iterable[int], messages: int,
                paths: Sequence[str] | None = None) -> None:
    """Refuse an Avro value program the kernel must not run (see the module's docstring).

    Parameters
    ----------
    program, aux, consts, coldesc : array-like
        As ``kbatch.values.avro._avrokernel.run`` takes them: four int32 words per instruction, the
        int32 tables, the constant bytes, four int32 words per column.
    entries : iterable of int
        Every instruction a record may start at (each writer's entry, the null record's).
    messages : int
        How many messages ``FAIL`` may name.
    paths : sequence of str, optional
        Each instruction's field path (for the error).

    Raises
    ------
    ProgramError
        Naming the first instruction found wrong, its path and the operand.
    """
    _Verifier(program, aux, consts, coldesc, messages, paths).run(entries)


class _Verifier:
    def __init__(self, program: Any, aux: Any, consts: Any, coldesc: Any, messages: int,
                 paths: Sequence[str] | None) -> None:
        words = [int(x) for x in program]
        desc = [int(x) for x in coldesc]
        if not words or len(words) % 4 or not desc or len(desc) % 4:
            raise ProgramError("the program and the column descriptions are four words a row, not empty")
        self.code = [words[i:i + 4] for i in range(0, len(words), 4)]
        self.aux = [int(x) for x in aux]
        self.nconsts = len(consts)
        self.messages = messages
        self.paths = paths
        self.kind = desc[0::4]
        self.width = desc[1::4]
        self.parent = desc[2::4]
        self.nullable = desc[3::4]
        n = len(self.kind)
        self.children: list[list[int]] = [[] for _ in range(n)]
        for c in range(n):
            p = self.parent[c]
            if not ((c == 0 and p == -1) or 0 <= p < c):
                raise ProgramError(f"column {c}: parent {p} (columns are in pre-order, the root first)")
            if p >= 0:
                self.children[p].append(c)
        for c in range(n):
            kind = self.kind[c]
            if kind not in _KIND_NAMES or (kind == FIXEDW and self.width[c] < 1) \
                    or (kind == LIST and self.children[c] != [c + 1]):
                raise ProgramError(f"column {c}: kind {kind}, width {self.width[c]}, children {self.children[c]} "
                                   f"(a known kind; a fixed width of 1 byte or more; a list's one child after it)")
        self.folded = [self.kind[c] == STRUCT and not self.nullable[c] and c + 1 < n and self.parent[c + 1] == c
                       for c in range(n)]
        self.owner: dict[int, int] = {}  # instruction -> the entry or subroutine whose code it is
        self.effects: dict[int, tuple[tuple[int, int], ...]] = {}
        self.pending: dict[int, bool] = {}  # subroutine -> whether a GOSUB assumed it writes nothing
        self.skips: dict[int, int] = {}  # skip sequence -> the deepest nesting it was checked at

    # ------------------------------------------------------------ reporting

    def fail(self, pc: int, what: str) -> ProgramError:
        op = _NAMES.get(self.code[pc][0], str(self.code[pc][0])) if 0 <= pc < len(self.code) else "?"
        path = self.paths[pc] if self.paths is not None and 0 <= pc < len(self.paths) else "?"
        return ProgramError(f"instruction {pc} ({op} at {path}): {what}")

    # ------------------------------------------------------------ 1. operands

    def column(self, pc: int, col: int, kind: int = -1, width: int = 0) -> None:
        if not 0 <= col < len(self.kind):
            raise self.fail(pc, f"column operand {col} out of range (0-{len(self.kind) - 1})")
        if self.folded[col]:
            raise self.fail(pc, f"column operand {col} is a folded struct (no instruction writes it)")
        if kind >= 0 and self.kind[col] != kind:
            raise self.fail(pc, f"column operand {col} is a {_KIND_NAMES.get(self.kind[col], self.kind[col])} "
                                f"column, the op writes a {_KIND_NAMES[kind]} one")
        if width and self.width[col] != width:
            raise self.fail(pc, f"column operand {col} is {self.width[col]} bytes wide, the op writes {width}")

    def is_map(self, col: int) -> bool:
        """Whether ``col`` is a map's list column: its child a struct (the entries) whose first
        child, right after it, is the key's binary column (what the kernel's map pass reads)."""
        n = len(self.kind)
        return (col >= 0 and col + 2 < n and self.kind[col] == LIST and self.kind[col + 1] == STRUCT
                and self.parent[col + 1] == col and self.kind[col + 2] == BIN and self.parent[col + 2] == col + 1)

    def target(self, pc: int, to: int, operand: str) -> None:
        if not 0 <= to < len(self.code):
            raise self.fail(pc, f"{operand} {to} out of the code (0-{len(self.code) - 1})")

    def operands(self, pc: int) -> None:
        op, a, b, c = self.code[pc]
        if op not in _NAMES:
            raise self.fail(pc, f"unknown opcode {op}")
        if op in _WRITES:
            kind, width = _WRITES[op]
            if op == TIME:
                if b not in (0, 1):
                    raise self.fail(pc, f"operand b={b} is neither 0 (millis) nor 1 (micros)")
                width = 8 if b else 4
            elif op == FIXED_W:
                if b <= 0:
                    raise self.fail(pc, f"size operand b={b} is not positive")
                width = b
            self.column(pc, a, kind, width)
        if op == ENUM:
            if b < 0 or c < 0 or b + 2 * c > len(self.aux):
                raise self.fail(pc, f"enum table aux[{b}:{b + 2 * c}] out of aux (length {len(self.aux)})")
            for k in range(c):
                at, size = self.aux[b + 2 * k], self.aux[b + 2 * k + 1]
                if at >= 0 and (size < 0 or at + size > self.nconsts):
                    raise self.fail(pc, f"enum symbol {k}: consts[{at}:{at + size}] out of the constants "
                                        f"(length {self.nconsts})")
        elif op == UNION:
            if a < 1 or b < 0 or b + a > len(self.aux):
                raise self.fail(pc, f"union of a={a} branches, table aux[{b}:{b + a}] out of aux "
                                    f"(length {len(self.aux)})")
            for k in range(a):
                self.target(pc, self.aux[b + k], f"branch {k} target")
        elif op == NULLABLE:
            if a not in (0, 1):
                raise self.fail(pc, f"null branch a={a} is neither 0 nor 1")
            self.column(pc, b)
        elif op == NULLSLOT:
            self.column(pc, a)
        elif op == ARRAY:
            if a != -1:
                self.column(pc, a, LIST)
                if a + 1 >= len(self.kind) or self.parent[a + 1] != a:
                    raise self.fail(pc, f"list column {a} has no child after it")
            self.target(pc, b, "exit operand b")
            if b < 1 or self.code[b - 1][0] != LOOP:
                raise self.fail(pc, f"exit operand b={b} does not follow a LOOP")
            if c < 0:
                raise self.fail(pc, f"least item size c={c} is negative")
        elif op == LOOP:
            if a not in (0, 1):
                raise self.fail(pc, f"map operand a={a} is neither 0 (a list) nor 1 (a map)")
        elif op in (JUMP, CALL, GOSUB):
            self.target(pc, a, "target a")
            if op == CALL and (b < 0 or c < 0 or b + c > self.nconsts):
                raise self.fail(pc, f"default consts[{b}:{b + c}] out of the constants (length {self.nconsts})")
        elif op == FAIL:
            if not 0 <= a < self.messages:
                raise self.fail(pc, f"message operand a={a} out of range ({self.messages} messages)")
        elif op == SKIP_N or op in (FIXED, DEC_FIXED):
            if (b if op != SKIP_N else a) < 0:
                raise self.fail(pc, "size operand is negative")
        elif op == SKIP:
            self.skip_tree(pc, a, 0)
        elif op == UUID_FIXED and b != 16:
            raise self.fail(pc, f"size operand b={b}: a uuid fixed is 16 bytes")
        elif op == DURATION and b != 12:
            raise self.fail(pc, f"size operand b={b}: a duration is 12 bytes")
        elif op == LONG_MUL and b < 1:
            raise self.fail(pc, f"factor operand b={b} is not positive")
        if op in (DEC_BYTES, DEC_FIXED) and not 0 <= c <= _MAX_PRECISION:
            raise self.fail(pc, f"precision operand c={c} out of 0-{_MAX_PRECISION}")

    def skip_tree(self, pc: int, seq: int, nesting: int) -> None:
        """The skip sequence at ``aux[seq]``, ``nesting`` unions and arrays deep."""
        if self.skips.get(seq, -1) >= nesting:
            return  # (checked at this depth or deeper already: within the nesting left here too)
        aux = self.aux
        if not 0 <= seq < len(aux) or aux[seq] < 0 or seq + 1 + 3 * aux[seq] > len(aux):
            raise self.fail(pc, f"skip sequence at aux[{seq}] out of aux (length {len(aux)})")
        for k in range(aux[seq]):
            base = seq + 1 + 3 * k
            kind, x, y = aux[base:base + 3]
            if kind not in SKIP_NODES.values():
                raise self.fail(pc, f"skip node at aux[{base}]: unknown kind {kind}")
            if kind == SK_FIXED and x < 0:
                raise self.fail(pc, f"skip node at aux[{base}]: negative size {x}")
            if kind == SK_CHOICE and (x < 1 or y <= base or y + x > len(aux) or min(aux[y:y + x]) < -2):
                raise self.fail(pc, f"skip node at aux[{base}]: choice of {x} branches, table aux[{y}:{y + x}] "
                                    f"(at least one; after the node, within aux; each -2 or more)")
            if kind not in (SK_UNION, SK_ARRAY):
                continue
            if nesting >= SKIP_NESTING:
                raise self.fail(pc, f"skip node at aux[{base}]: unions and arrays nested over {SKIP_NESTING} deep")
            if kind == SK_ARRAY:
                if x < 0 or y <= base:
                    raise self.fail(pc, f"skip node at aux[{base}]: least item size {x}, items at aux[{y}] "
                                        f"(not negative; after the node)")
                self.skip_tree(pc, y, nesting + 1)
                continue
            if x < 1 or y <= base or y + x > len(aux):
                raise self.fail(pc, f"skip node at aux[{base}]: union of {x} branches, table aux[{y}:{y + x}] "
                                    f"(at least one; after the node, within aux)")
            for b in range(x):
                if aux[y + b] <= y:
                    raise self.fail(pc, f"skip node at aux[{base}]: branch {b} at aux[{aux[y + b]}], not after "
                                        f"its table")
                self.skip_tree(pc, aux[y + b], nesting + 1)
        self.skips[seq] = max(nesting, self.skips.get(seq, -1))

    # ------------------------------------------------------------ 2, 3. paths

    def slots(self, col: int) -> dict[int, int]:
        """The columns one slot of ``col`` writes once each: it and those under it through
        structs (not through lists), folded structs left out."""
        out = {} if self.folded[col] else {col: 1}
        if self.kind[col] == STRUCT:
            for child in self.children[col]:
                out.update(self.slots(child))
        return out

    def written(self, pc: int, writes: _Writes, want: dict[int, int], where: str) -> None:
        got = _counts(writes)
        if got != want:
            bad = sorted((c, got.get(c, 0), want.get(c, 0)) for c in got.keys() | want.keys()
                         if got.get(c, 0) != want.get(c, 0))
            raise self.fail(pc, f"{where}: " + ", ".join(f"column {c} written {g} times, not {w}" for c, g, w in bad))

    def run(self, entries: Iterable[int]) -> None:
        for pc in range(len(self.code)):
            self.operands(pc)
        record = self.slots(0)
        for entry in sorted(set(entries)):
            if not 0 <= entry < len(self.code):
                raise ProgramError(f"entry {entry} out of the code (0-{len(self.code) - 1})")
            ends = self.walk(entry, False)
            for pc, state in ends:
                self.written(pc, state[0][2], record, "at the record's END")

    def effect(self, pc: int, start: int, gosub: bool) -> tuple[tuple[int, int], ...]:
        """The writes of the subroutine at ``start``, by the first instruction calling it."""
        if start in self.pending:
            if not gosub:
                raise self.fail(pc, f"CALL {start} calls itself (only a skipping GOSUB may)")
            self.pending[start] = True
            return ()
        if start not in self.effects:
            if start in self.owner:
                raise self.fail(pc, f"target {start} is inside the code of the entry or subroutine at "
                                    f"{self.owner[start]}, not a subroutine's start")
            self.pending[start] = False
            rets = self.walk(start, True)
            assumed = self.pending.pop(start)
            if not rets:
                raise self.fail(pc, f"the subroutine at {start} never returns (no RET)")
            effect = tuple(sorted(_counts(rets[0][1][0][2]).items()))
            for ret, state in rets[1:]:
                self.written(ret, state[0][2], dict(effect), f"RET of the subroutine at {start}: its other RETs "
                                                             f"write otherwise")
            if assumed and effect:
                raise self.fail(pc, f"the recursive subroutine at {start} writes columns")
            self.effects[start] = effect
        effect = self.effects[start]
        if gosub and effect:
            raise self.fail(pc, f"the GOSUB subroutine at {start} writes columns (a skip writes none)")
        return effect

    def meet(self, pc: int, first: _State, then: _State) -> None:
        """Two paths meeting at ``pc`` must be in the same loops and have written the same."""
        if len(first) != len(then) or any(f[:2] != t[:2] for f, t in zip(first, then, strict=True)):
            raise self.fail(pc, f"paths meet here in different loops (of the ARRAYs at "
                                f"{[f[0] for f in first[1:]]} and {[t[0] for t in then[1:]]})")
        for f, t in zip(first, then, strict=True):
            diff = _difference(f[2], t[2])
            if diff:
                raise self.fail(pc, "paths meet here with different writes: " + ", ".join(
                    f"column {c} {abs(n)} more times on the {'first' if n > 0 else 'other'}"
                    for c, n in sorted(diff.items())))

    def walk(self, start: int, sub: bool) -> list[tuple[int, _State]]:
        """Every path from ``start`` (an entry, or a subroutine when ``sub``), each instruction
        once per state: the ENDs (RETs) reached and the states there."""
        seen: dict[int, _State] = {}
        ends: list[tuple[int, _State]] = []
        work: list[tuple[int, int, _State]] = [(start, start, ((-1, -1, None),))]
        code = self.code
        while work:
            came, pc, state = work.pop()
            if not 0 <= pc < len(code):
                raise self.fail(came, "runs off the end of the code")
            owner = self.owner.setdefault(pc, start)
            if owner != start:
                raise self.fail(came, f"goes to instruction {pc}, in the code of the entry or subroutine at {owner}")
            if pc in seen:
                self.meet(pc, seen[pc], state)
                continue
            seen[pc] = state
            op, a, b, _ = code[pc]
            if op in _WRITES or op == NULLSLOT:
                work.append((pc, pc + 1, _write(state, a)))
            elif op == NULLABLE:
                work.append((pc, pc + 2, _write(state, b)))
                work.append((pc, pc + 1, state))
            elif op == UNION:
                work.extend((pc, self.aux[b + k], state) for k in range(a))
            elif op == JUMP:
                work.append((pc, a, state))
            elif op == FAIL:
                continue
            elif op in (END, RET):
                if (op == END) == sub:
                    raise self.fail(pc, "END in a subroutine" if sub else "RET outside a subroutine")
                if len(state) != 1:
                    raise self.fail(pc, f"{_NAMES[op]} inside the loop of the ARRAY at {state[-1][0]}")
                ends.append((pc, state))
            elif op == ARRAY:
                work.append((pc, b, state if a < 0 else _write(state, a)))  # no items: the exit
                work.append((pc, pc + 1, (*state, (pc, a, None))))
            elif op == LOOP:
                array, col, writes = state[-1]
                if array < 0:
                    raise self.fail(pc, "LOOP without an ARRAY")
                if code[array][2] != pc + 1:
                    raise self.fail(pc, f"closes the ARRAY at {array}, whose exit is {code[array][2]}, not {pc + 1}")
                if a and not self.is_map(col):
                    raise self.fail(pc, f"map operand a={a}: the ARRAY at {array} writes column {col}, not a map's "
                                        f"list (a list of a struct of a key string first)")
                self.written(pc, writes, {} if col < 0 else self.slots(col + 1), f"an item of the ARRAY at {array}")
                outer = state[:-1]
                work.append((pc, pc + 1, outer if col < 0 else _write(outer, col)))
            elif op in (CALL, GOSUB):
                effect = self.effect(pc, a, op == GOSUB)
                work.append((pc, pc + 1, _write(state, *(c for c, times in effect for _ in range(times)))))
            else:  # the skips: no column
                work.append((pc, pc + 1, state))
        return ends


def _write(state: _State, *cols: int) -> _State:
    """``state`` with one more write to each of ``cols`` in the innermost loop's item."""
    array, col, writes = state[-1]
    for c in cols:
        writes = (c, writes, 1 if writes is None else writes[2] + 1)
    return (*state[:-1], (array, col, writes))


def _counts(writes: _Writes) -> dict[int, int]:
    """How many times each column is in ``writes``."""
    out: dict[int, int] = {}
    while writes is not None:
        out[writes[0]] = out.get(writes[0], 0) + 1
        writes = writes[1]
    return out


def _difference(a: _Writes, b: _Writes) -> dict[int, int]:
    """The columns written a different number of times in ``a`` and ``b`` (``a``'s count minus
    ``b``'s), walking each back only to the list they share."""
    diff: dict[int, int] = {}
    la = 0 if a is None else a[2]
    lb = 0 if b is None else b[2]
    while a is not b:
        if la >= lb:
            assert a is not None
            diff[a[0]] = diff.get(a[0], 0) + 1
            a, la = a[1], la - 1
        else:
            assert b is not None
            diff[b[0]] = diff.get(b[0], 0) - 1
            b, lb = b[1], lb - 1
    return {c: n for c, n in diff.items() if n}
