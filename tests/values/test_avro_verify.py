"""The verifier of Avro value programs (``kbatch.values.avro._verify``): every program the compiler
makes verifies, and a program breaking any one of its rules is refused, naming the instruction
and the operand. (Every decode of the other value tests runs through it too: ``AvroProgram.arrays``
verifies before anything reaches the kernel.)"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.avro_evolve import evolve
from support.avro_random import random_schema

from kbatch.values import AvroSchemaError, ProgramError, Schema
from kbatch.values.avro._avrokernel import KINDS, OPS, SKIP_NESTING, SKIP_NODES
from kbatch.values.avro._compile import AvroProgram
from kbatch.values.avro._schema import parse_avro_schema
from kbatch.values.avro._verify import verify_avro

OP = OPS
STRUCT, FIXEDW, BIN, LIST, NULLT = (KINDS[k] for k in ("STRUCT", "FIXEDW", "BIN", "LIST", "NULLT"))


def compiled(reader: Any, *writers: Any, mapping: str = "spark", max_depth: int | None = None) -> AvroProgram:
    p = AvroProgram(parse_avro_schema(Schema(json.dumps(reader))), mapping, max_depth)
    for w in writers:
        p.add_writer(parse_avro_schema(Schema(json.dumps(w))))
    return p


def verify(p: AvroProgram) -> None:
    """``p`` verified from scratch (``arrays`` caches its verdict per version)."""
    program, aux, consts, coldesc = p.arrays()
    verify_avro(program, aux, consts, coldesc, p.entries, len(p.messages), p.paths)


def record(name: str, fields: list[dict]) -> dict:
    return {"type": "record", "name": name, "fields": fields}


# ---------------------------------------------------------------- programs the compiler makes

OPTIONAL_ITEMS = record("R", [
    {"name": "f", "type": ["null", {"type": "array", "items": record("I", [{"name": "b", "type": "boolean"}])}]},
    {"name": "g", "type": ["null", {"type": "map", "values": record("J", [{"name": "b", "type": "int"}])}]}])
OPTIONAL_ITEMS_ADDED = record("R", [
    {"name": "f", "type": ["null", {"type": "array", "items": record("I", [
        {"name": "d", "type": "bytes", "default": "z"},
        {"name": "note", "type": ["null", "string"], "default": None}])}]},
    {"name": "g", "type": ["null", {"type": "map", "values": record("J", [
        {"name": "b", "type": "long"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]},
                                        "default": "B"}])}]}])  # fmt: skip
NODE = record("Node", [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}])
TREE = record("T", [{"name": "v", "type": "int"}, {"name": "kids", "type": {"type": "array", "items": "T"}},
                    {"name": "u", "type": ["null", "string", "T", "long"]}])
NODE_IN = record("R", [{"name": "f", "type": ["null", NODE]}])
DROPPED = record("R", [{"name": "f", "type": ["null", record("Node", [])]}])
EVERY = record("All", [
    {"name": "a", "type": "long"}, {"name": "b", "type": "boolean"}, {"name": "c", "type": "float"},
    {"name": "d", "type": "double"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
    {"name": "f", "type": {"type": "fixed", "name": "F", "size": 3}},
    {"name": "g", "type": {"type": "fixed", "name": "G", "size": 16, "logicalType": "uuid"}},
    {"name": "h", "type": {"type": "fixed", "name": "H", "size": 12, "logicalType": "duration"}},
    {"name": "i", "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 10,
                           "scale": 2}},
    {"name": "j", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}},
    {"name": "k", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "l", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "m", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "n", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "o", "type": ["null", "int", "string", record("Q", [])]}, {"name": "p", "type": "null"},
    {"name": "q", "type": ["int", "long"]}, {"name": "r", "type": {"type": "map", "values": ["null", "bytes"]}}])


@pytest.mark.parametrize("mapping", ["spark", "arrow"])
@pytest.mark.parametrize(("reader", "writers", "max_depth"), [
    (OPTIONAL_ITEMS_ADDED, [OPTIONAL_ITEMS, OPTIONAL_ITEMS_ADDED], None),
    (OPTIONAL_ITEMS, [OPTIONAL_ITEMS_ADDED], None),
    (NODE, [NODE], 3),
    (record("Node", [{"name": "v", "type": "long"}]), [NODE], None),
    (TREE, [TREE], 2),
    (EVERY, [EVERY], None),
    (EVERY, [OPTIONAL_ITEMS, NODE], None),  # unresolvable writers: one FAIL each
    (DROPPED, [NODE_IN], None),  # the issue's sibling: a record dropping a recursive field
])  # fmt: skip
def test_what_the_compiler_makes_verifies(reader: Any, writers: list[Any], max_depth: int | None,
                                          mapping: str) -> None:
    p = compiled(reader, *writers, mapping=mapping, max_depth=max_depth)
    p.add_failure("a writer schema that does not parse")
    verify(p)


@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4), mapping=st.sampled_from(["spark", "arrow"]))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_schema_pairs_verify(seed: int, depth: int, mapping: str) -> None:
    rng = random.Random(seed)
    writer = random_schema(rng, depth)
    reader = evolve(writer, rng)
    try:
        p = compiled(reader, writer, reader, evolve(writer, rng), mapping=mapping)
    except AvroSchemaError:  # a reader without a layout (not this test's concern)
        return
    verify(p)


# ---------------------------------------------------------------- the old compiler's item 1

# Made by kbatch's compiler before issue 34's fix (commit cd89afd):
#   p = AvroProgram(parse_avro_schema(Schema(json.dumps(READER)))); p.add_writer(parse_avro_schema(
#   Schema(json.dumps(WRITER)))), with tests/values/test_avro_compile_safety.py's WRITER and READER
#   (an optional array of records whose reader adds a field with a default): p.code, p.aux,
#   bytes(p.consts), p.layout.coldesc(), entries [p.null_entry, the writer's]. Instruction 7's
#   ARRAY writes column 15 of 4: a stale CALL patch, the heap out-of-bounds of the issue.
OLD_ITEM_1 = {
    "program": [14, 0, 0, 0, 14, 1, 0, 0, 16, 0, 0, 0, 13, 0, 0, 0, 4, 2, 0, 0, 14, 1, 0, 0, 15, 12, 0, 0,
             18, 15, 11, 1, 30, 1, 0, 0, 20, 13, 2, 2, 19, 0, 0, 0, 15, 12, 0, 0, 16, 0, 0, 0, 3, 3, 0, 0,
             21, 0, 0, 0, 3, 3, 0, 0, 21, 0, 0, 0],
    "aux": [5, 7], "consts": b"\x02z\x02z", "coldesc": [5, 0, -1, 1, 4, 0, 0, 1, 5, 0, 1, 0, 3, 0, 2, 0],
    "entries": [0, 3]}
# The same for the sibling (test_avro_compile_safety's NODE_WRITER read by NODE_READER, a record
# dropping a recursive field): instruction 8's UNION has 14 branches (a stale GOSUB patch), 2 in truth.
OLD_SIBLING = {
    "program": [14, 0, 0, 0, 14, 1, 0, 0, 16, 0, 0, 0, 13, 0, 0, 0, 4, 2, 2, 0, 14, 1, 0, 0, 15, 13, 0, 0,
             13, 1, 0, 0, 4, 14, 4, 0, 15, 12, 0, 0, 31, 14, 0, 0, 15, 12, 0, 0, 15, 13, 0, 0, 16, 0, 0, 0,
             4, 2, 6, 0, 15, 18, 0, 0, 31, 14, 0, 0, 15, 18, 0, 0, 21, 0, 0, 0],
    "aux": [7, 8, 5, 7, 9, 10, 15, 16], "consts": b"\0", "coldesc": [5, 0, -1, 1, 5, 0, 0, 1], "entries": [0, 3]}


@pytest.mark.parametrize(("old", "reason"), [
    (OLD_ITEM_1, r"instruction 7 \(ARRAY at \?\): column operand 15 out of range"),
    (OLD_SIBLING, r"instruction 8 \(UNION at \?\): union of a=14 branches, table aux\[4:18\] out of aux"),
])  # fmt: skip
def test_the_old_compiler_s_programs_for_issue_34_are_refused(old: dict, reason: str) -> None:
    with pytest.raises(ProgramError, match=reason):
        verify_avro(old["program"], old["aux"], old["consts"], old["coldesc"], old["entries"], 0)


# ---------------------------------------------------------------- one rule at a time

# Columns: 0 the root (struct, nullable), 1 a long, 2 a string, 3 a list of 4 longs, 5 a struct
# without validity (folded) of 6 an int, 7 a null.
COLS = [STRUCT, 0, -1, 1, FIXEDW, 8, 0, 0, BIN, 0, 0, 0, LIST, 0, 0, 0, FIXEDW, 8, 3, 0, STRUCT, 0, 0, 0,
        FIXEDW, 4, 5, 0, NULLT, 0, 0, 0]
NULL_RECORD = [[OP["NULLSLOT"], c, 0, 0] for c in (0, 1, 2, 3, 6, 7)] + [[OP["END"], 0, 0, 0]]  # 0-6
E = len(NULL_RECORD)  # the writer's entry: 7
GOOD = [
    *NULL_RECORD,
    [OP["STRUCT"], 0, 0, 0],  # 7
    [OP["LONG"], 1, 0, 0],  # 8
    [OP["STRING"], 2, 0, 0],  # 9
    [OP["ARRAY"], 3, 13, 1],  # 10
    [OP["LONG"], 4, 0, 0],  # 11
    [OP["LOOP"], 0, 0, 0],  # 12
    [OP["INT"], 6, 0, 0],  # 13
    [OP["NULLV"], 7, 0, 0],  # 14
    [OP["END"], 0, 0, 0],  # 15
]  # fmt: skip
AUX = [0, 1, -1, -1, 20, 21]
CONSTS = b"Xabc"


def check(code: list[list[int]], *, aux: list[int] = AUX, consts: bytes = CONSTS, cols: list[int] = COLS,
          entries: tuple[int, ...] = (0, E), messages: int = 1) -> None:
    verify_avro([w for ins in code for w in ins], aux, consts, cols, entries, messages,
                [f"value.i{i}" for i in range(len(code))])


def edit(at: int, *ins: list[int], code: list[list[int]] = GOOD) -> list[list[int]]:
    """``code`` with instruction ``at`` replaced by ``ins`` (none: removed; more: inserted)."""
    return [*code[:at], *ins, *code[at + 1:]]


def test_the_hand_made_program_verifies() -> None:
    check(GOOD)


def sub(*body: list[int]) -> list[list[int]]:
    """GOOD with a subroutine after it (at 16)."""
    return [*GOOD, *body]


SUB = len(GOOD)
WIDE = [16 if i == 5 else w for i, w in enumerate(COLS)]  # column 1 16 bytes wide
RET = [OP["RET"], 0, 0, 0]
SKIPPING = edit(15, [OP["SKIP"], len(AUX), 0, 0], [OP["END"], 0, 0, 0])  # a SKIP of the tree at aux[6] before END
VARINT_, BYTES_, FIXED_, UNION_, ARRAY_, CHOICE_ = (SKIP_NODES[k] for k in ("VARINT", "BYTES", "FIXED", "UNION",
                                                                             "ARRAY", "CHOICE"))
# at aux[6]: a varint; a union (table at 19) of nothing (21) or bytes (22); an array of 3-byte
# items (26); a choice (table at 30) of nothing or a varint
SKIP_TREE = [4, VARINT_, 0, 0, UNION_, 2, 19, ARRAY_, 3, 26, CHOICE_, 2, 30, 21, 22, 0, 1, BYTES_, 0, 0,
             1, FIXED_, 3, 0, 0, -1]


def nested_arrays(depth: int) -> list[int]:
    """A skip tree at aux[6] of ``depth`` arrays each the item of the one before."""
    out: list[int] = []
    for k in range(depth):
        out += [1, ARRAY_, 0, len(AUX) + 4 * (k + 1)]
    return [*out, 0]


BAD: list[tuple[str, list[list[int]], str, dict[str, Any]]] = [
    # 1. operands
    ("unknown opcode", edit(8, [99, 1, 0, 0]), r"instruction 8 \(99 at value.i8\): unknown opcode 99", {}),
    ("column out of range", edit(8, [OP["LONG"], 8, 0, 0]), r"instruction 8 \(LONG .*column operand 8 out of range",
     {}),
    ("negative column", edit(8, [OP["LONG"], -1, 0, 0]), r"column operand -1 out of range", {}),
    ("wrong kind", edit(9, [OP["STRING"], 1, 0, 0]), r"column operand 1 is a FIXEDW column, the op writes a BIN", {}),
    ("wrong width", edit(8, [OP["INT"], 1, 0, 0]), r"column operand 1 is 8 bytes wide, the op writes 4", {}),
    ("struct op on a value", edit(7, [OP["STRUCT"], 1, 0, 0]), r"column operand 1 is a FIXEDW .* a STRUCT", {}),
    ("folded struct", edit(13, [OP["STRUCT"], 5, 0, 0], [OP["INT"], 6, 0, 0]), r"column operand 5 is a folded struct",
     {}),
    ("nullslot on folded", edit(13, [OP["NULLSLOT"], 5, 0, 0], [OP["INT"], 6, 0, 0]), r"5 is a folded struct", {}),
    ("nullv not null", edit(14, [OP["NULLV"], 6, 0, 0]), r"column operand 6 is a FIXEDW column, the op writes a NULLT",
     {}),
    ("array of no list", edit(10, [OP["ARRAY"], 2, 13, 1]), r"column operand 2 is a BIN column, the op writes a LIST",
     {}),
    ("array exit out", edit(10, [OP["ARRAY"], 3, 99, 1]), r"exit operand b 99 out of the code", {}),
    ("array exit not after loop", edit(10, [OP["ARRAY"], 3, 12, 1]), r"exit operand b=12 does not follow a LOOP", {}),
    ("negative least size", edit(10, [OP["ARRAY"], 3, 13, -1]), r"least item size c=-1 is negative", {}),
    ("enum table out of aux", edit(9, [OP["ENUM"], 2, 4, 2]), r"enum table aux\[4:8\] out of aux \(length 6\)", {}),
    ("enum symbol out of consts", edit(9, [OP["ENUM"], 2, 0, 3]), r"enum symbol 2: consts\[20:41\] out of the const",
     {}),
    ("union table out of aux", edit(9, [OP["UNION"], 3, 4, 0]), r"union of a=3 branches, table aux\[4:7\] out of aux",
     {}),
    ("union of no branch", edit(9, [OP["UNION"], 0, 0, 0]), r"union of a=0 branches", {}),
    ("union target out", edit(9, [OP["UNION"], 2, 4, 0]), r"branch 0 target 20 out of the code", {}),
    ("call consts out", edit(9, [OP["CALL"], SUB, 2, 3], code=sub([OP["STRING"], 2, 0, 0], RET)),
     r"instruction 9 \(CALL .*default consts\[2:5\] out of the constants \(length 4\)", {}),
    ("jump out", edit(9, [OP["JUMP"], -3, 0, 0]), r"target a -3 out of the code", {}),
    ("message out of range", edit(9, [OP["FAIL"], 1, 0, 0]), r"message operand a=1 out of range \(1 messages\)", {}),
    ("skip negative", edit(9, [OP["SKIP_N"], -2, 0, 0]), r"size operand is negative", {}),
    ("uuid fixed size", edit(9, [OP["UUID_FIXED"], 2, 15, 0]), r"b=15: a uuid fixed is 16 bytes", {}),
    ("duration size", edit(8, [OP["DURATION"], 1, 16, 0]), r"b=16: a duration is 12 bytes", {"cols": WIDE}),
    ("precision", edit(8, [OP["DEC_BYTES"], 1, 0, 39]), r"precision operand c=39 out of 0-38", {"cols": WIDE}),
    ("skip tree out of aux", edit(15, [OP["SKIP"], 99, 0, 0], [OP["END"], 0, 0, 0]),
     r"instruction 15 \(SKIP .*skip sequence at aux\[99\] out of aux", {}),
    ("skip nodes past aux", SKIPPING, r"skip sequence at aux\[6\] out of aux \(length 10\)",
     {"aux": [*AUX, 2, 1, 0, 0]}),
    ("skip node kind", SKIPPING, r"skip node at aux\[7\]: unknown kind 9", {"aux": [*AUX, 1, 9, 0, 0]}),
    ("skip fixed size", SKIPPING, r"negative size -1", {"aux": [*AUX, 1, FIXED_, -1, 0]}),
    ("skip union of none", SKIPPING, r"union of 0 branches", {"aux": [*AUX, 1, UNION_, 0, 10]}),
    ("skip union cycle", SKIPPING, r"branch 0 at aux\[6\], not after its table", {"aux": [*AUX, 1, UNION_, 1, 10, 6]}),
    ("skip array cycle", SKIPPING, r"items at aux\[6\] \(not negative; after the node\)",
     {"aux": [*AUX, 1, ARRAY_, 1, 6]}),
    ("skip array size", SKIPPING, r"least item size -1", {"aux": [*AUX, 1, ARRAY_, -1, 10, 0]}),
    ("skip choice code", SKIPPING, r"choice of 1 branches", {"aux": [*AUX, 1, CHOICE_, 1, 10, -3]}),
    ("skip nesting", SKIPPING, rf"unions and arrays nested over {SKIP_NESTING} deep",
     {"aux": [*AUX, *nested_arrays(SKIP_NESTING + 1)]}),
    ("time unit", edit(8, [OP["TIME"], 1, 2, 0]), r"operand b=2 is neither 0", {}),
    ("fixed_w width", edit(8, [OP["FIXED_W"], 1, 4, 0]), r"column operand 1 is 8 bytes wide, the op writes 4", {}),
    ("long_mul by zero", edit(8, [OP["LONG_MUL"], 1, 0, 0]), r"factor operand b=0 is not positive", {}),
    ("nullable branch", edit(8, [OP["NULLABLE"], 2, 1, 0], [OP["LONG"], 1, 0, 0]), r"null branch a=2 is neither 0", {}),
    ("bad column tree", GOOD, r"column 2: parent 5", {"cols": [*COLS[:10], 5, *COLS[11:]]}),
    ("unknown column kind", GOOD, r"column 7: kind 9", {"cols": [*COLS[:28], 9, *COLS[29:]]}),
    ("zero width", GOOD, r"column 1: kind 2, width 0", {"cols": [*COLS[:5], 0, *COLS[6:]]}),
    ("list without its child", GOOD, r"column 3: kind 4, width 0, children \[\]",
     {"cols": [*COLS[:18], 0, *COLS[19:]]}),
    # 2. control flow
    ("ret in an entry", edit(15, RET), r"instruction 15 \(RET .*RET outside a subroutine", {}),
    ("end in a subroutine", edit(9, [OP["CALL"], SUB, 0, 1], code=sub([OP["END"], 0, 0, 0])),
     r"instruction 16 \(END .*END in a subroutine", {}),
    ("loop without array", edit(9, [OP["LOOP"], 0, 0, 0]), r"instruction 9 \(LOOP .*LOOP without an ARRAY", {}),
    ("loop map operand", edit(12, [OP["LOOP"], 2, 0, 0]), r"instruction 12 \(LOOP .*map operand a=2 is neither 0",
     {}),
    ("map loop over a list of longs", edit(12, [OP["LOOP"], 1, 0, 0]),
     r"map operand a=1: the ARRAY at 10 writes column 3, not a map's list", {}),
    ("off the end", GOOD[:-1], r"instruction 14 \(NULLV .*runs off the end of the code", {}),
    ("end inside a loop", edit(11, [OP["END"], 0, 0, 0]), r"END inside the loop of the ARRAY at 10", {}),
    ("call into an entry's code", edit(9, [OP["CALL"], 8, 0, 1]), r"target 8 is inside the code of the entry .* at 7",
     {}),
    ("jump into another's code", edit(9, [OP["JUMP"], 2, 0, 0]),
     r"goes to instruction 2, in the code of the entry or subroutine at 0", {}),
    ("subroutine never returns", edit(9, [OP["CALL"], SUB, 0, 1], code=sub([OP["FAIL"], 0, 0, 0])),
     r"the subroutine at 16 never returns", {}),
    ("a call calling itself", edit(9, [OP["CALL"], SUB, 0, 1], code=sub([OP["CALL"], SUB, 0, 1],
                                                                        [OP["STRING"], 2, 0, 0], RET)),
     r"CALL 16 calls itself", {}),
    ("entry out of range", GOOD, r"entry 16 out of the code", {"entries": (0, E, SUB)}),
    # 3. writes
    ("written twice", edit(14, [OP["LONG"], 1, 0, 0]), r"at the record's END: column 1 written 2 times, not 1", {}),
    ("not written", edit(9, [OP["SKIP_BYTES"], 0, 0, 0]), r"at the record's END: column 2 written 0 times, not 1", {}),
    ("an item writing the record's column", edit(11, [OP["LONG"], 1, 0, 0]),
     r"an item of the ARRAY at 10: column 1 written 1 times, not 0, column 4 written 0 times, not 1", {}),
    ("union branches differ", edit(9, [OP["UNION"], 2, 4, 0], code=sub(
        [OP["STRING"], 2, 0, 0], [OP["JUMP"], 10, 0, 0], [OP["NULLSLOT"], 1, 0, 0], [OP["JUMP"], 10, 0, 0])),
     r"instruction 10 \(ARRAY .*paths meet here with different writes", {"aux": [0, 1, -1, -1, 16, 18]}),
    ("nullable's value writes another column", [*GOOD[:8], [OP["NULLABLE"], 0, 2, 0], [OP["LONG"], 1, 0, 0],
                                                *GOOD[10:]],
     r"instruction 10 \(ARRAY .*paths meet here with different writes", {}),
    ("skipping loop writes", edit(10, [OP["ARRAY"], -1, 13, 1]), r"an item of the ARRAY at 10: column 4 written 1",
     {}),
    ("gosub writes", edit(9, [OP["GOSUB"], SUB, 0, 0], code=sub([OP["STRING"], 2, 0, 0], RET)),
     r"the GOSUB subroutine at 16 writes columns", {}),
    ("rets write otherwise", edit(9, [OP["CALL"], SUB, 0, 1], code=sub(
        [OP["UNION"], 2, 0, 0], [OP["STRING"], 2, 0, 0], RET, RET)),
     r"RET of the subroutine at 16: its other RETs write otherwise", {"aux": [17, 19]}),
]  # fmt: skip


@pytest.mark.parametrize(("code", "reason", "kw"), [pytest.param(c, r, k, id=name) for name, c, r, k in BAD])
def test_a_program_breaking_a_rule_is_refused(code: list[list[int]], reason: str, kw: dict[str, Any]) -> None:
    with pytest.raises(ProgramError, match=reason):
        check(code, **kw)


def test_a_skip_tree_verifies() -> None:
    check(SKIPPING, aux=[*AUX, *nested_arrays(SKIP_NESTING)])
    check(SKIPPING, aux=[*AUX, *SKIP_TREE])


def test_a_recursive_gosub_that_writes_nothing_verifies() -> None:
    # a skipping subroutine (at 17) calling itself on one branch: a recursive type past the depth kept
    check([*GOOD[:15], [OP["GOSUB"], 17, 0, 0], [OP["END"], 0, 0, 0],
           [OP["UNION"], 2, 4, 0], RET, [OP["GOSUB"], 17, 0, 0], RET], aux=[0, 0, 0, 0, 18, 19])


def test_a_decode_runs_only_a_verified_program() -> None:
    """What reaches the kernel is verified: a program spoilt after compiling is refused by
    ``arrays`` (its cache is per version, so a new writer re-verifies the whole)."""
    p = compiled(OPTIONAL_ITEMS_ADDED, OPTIONAL_ITEMS)
    p.arrays()
    p.add_writer(parse_avro_schema(Schema(json.dumps(OPTIONAL_ITEMS_ADDED))))
    array = max(i for i, ins in enumerate(p.code) if ins[0] == OP["ARRAY"])
    p.code[array][1] = 99
    with pytest.raises(ProgramError, match=rf"instruction {array} \(ARRAY at value.g\): column operand 99"):
        p.arrays()
