"""The Protobuf program verifier (issue 34): every program the compiler builds from the test
suite's .proto files and from random ones verifies, and a hand-made bad program is refused for
each rule of ``kbatch.values.protobuf._verify``."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc_tools")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.proto_gen import random_proto

from kbatch.values import ProgramError, ProtobufSchemaError, Schema, compile_proto
from kbatch.values.protobuf._compile import ProtoProgram
from kbatch.values.protobuf._verify import verify_proto


def _suite_protos() -> dict[str, str]:
    """The .proto texts of tests/values/test_protobuf_values.py, by constant name."""
    path = Path(__file__).with_name("test_protobuf_values.py")
    spec = importlib.util.spec_from_file_location("_protos_of_the_suite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and "syntax" in v}


SUITE = _suite_protos()
OPTIONS = [dict(zip(("emit_default_values", "enums_as_ints", "any_as_json"), flags, strict=True))
           for flags in itertools.product([False, True], repeat=3)]


def programs(text: str) -> list[ProtoProgram]:
    """A program of every message of ``text``, with every option (recursion cut at 1-3 when needed)."""
    schema = compile_proto(Schema(text, "PROTOBUF"))
    names = [m.full_name for m in schema.pool.FindFileByName(schema.file).message_types_by_name.values()]
    out = []
    for name, options in itertools.product(names, OPTIONS):
        one = schema.with_message(name)
        try:
            out.append(ProtoProgram(one, **options))
        except ProtobufSchemaError:  # recursive: cut it
            out += [ProtoProgram(one, recursive_depth=d, **options) for d in (1, 2, 3)]
    return out


def test_the_suite_protos_are_there() -> None:
    assert {"ORDER", "LEGACY", "EXTRAS", "ANYS", "NODE"} <= set(SUITE)


@pytest.mark.parametrize("name", sorted(SUITE))
def test_every_program_of_the_suite_verifies(name: str) -> None:
    built = programs(SUITE[name])  # ProtoProgram verifies what it builds (ProgramError otherwise)
    assert built
    for program in built:
        verify_proto(*program.arrays(), paths=program.paths)
        assert not any(a.flags.writeable for a in program.arrays())  # verified, then never changed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_every_program_of_random_protos_verifies(data: Any) -> None:
    text, _ = random_proto(data.draw, "r")
    for program in programs(text):
        verify_proto(*program.arrays(), paths=program.paths)


# ---------------------------------------------------------------- bad programs, one per rule


@pytest.fixture(scope="module")
def order() -> ProtoProgram:
    return ProtoProgram(compile_proto(Schema(SUITE["ORDER"], "PROTOBUF")))


def field_of(program: ProtoProgram, path: str) -> int:
    return program.paths.index(path)


MSG, FIELD = 7, 10
Break = Callable[[ProtoProgram, list[int], list[int], list[int], list[int]], Any]


def word(table: str, at: Any, value: Any) -> Break:
    """Set a word of ``table`` (``m``, ``f``, ``a``, ``cd``): ``at`` and ``value`` are numbers,
    or functions of the program and the tables (``value`` may read the table as it was)."""
    def breaks(p: ProtoProgram, m: list[int], f: list[int], a: list[int], cd: list[int]) -> None:
        tables = {"m": m, "f": f, "a": a, "cd": cd}
        where = at(p, **tables) if callable(at) else at
        tables[table][where] = value(p, **tables) if callable(value) else value
    return breaks


def fw(path: str, k: int, value: Any) -> Break:
    """Set word ``k`` of the field at ``path``."""
    return word("f", lambda p, **_: FIELD * field_of(p, path) + k, value)


def aux_of(path: str, k: int, plus: int, value: Any) -> Break:
    """Set ``aux[field word k + plus]`` of the field at ``path`` (its enum table, oneof list)."""
    return word("a", lambda p, f, **_: f[FIELD * field_of(p, path) + k] + plus, value)


def both(*breaks: Break) -> Break:
    return lambda *args: [b(*args) for b in breaks]


# each: what to break in ORDER's program, and the reason expected
BAD = [
    ("msgs-shape", lambda p, m, f, a, cd: m.pop(), "message table has"),
    ("fields-shape", lambda p, m, f, a, cd: f.pop(), "field table has"),
    ("kind", word("cd", 4 * 2, 7), "kind 7 is not one"),
    ("width", word("cd", 4 * 1 + 1, 3), "FIXEDW width 3"),
    ("pre-order", word("cd", 4 * 1 + 2, 5), "not an earlier column"),
    ("leaf-parent", word("cd", 4 * 7 + 2, 6), "which has no children"),
    ("list-children", word("cd", 4 * 8 + 2, 4), "LIST column with 2 children"),
    ("msg-column-range", word("m", 0, 99), "struct column 99 is out of range"),
    ("msg-column-kind", word("m", MSG, 6), "not STRUCT"),
    ("msg-column-shared", word("m", 2 * MSG, lambda p, m, **_: m[MSG]), "is message 1's too"),
    ("root", both(word("m", 0, lambda p, m, **_: m[3 * MSG]), word("m", 3 * MSG, 0)), "is not the root column 0"),
    ("struct-no-message", word("cd", 4 * 2, 5), "STRUCT column that is no message's"),
    ("field-range", word("m", 2, 100), r"fields \[7, 107\) lie outside"),
    ("dense-range", word("m", 3, lambda p, a, **_: len(a)), "dense table aux"),
    ("dense-foreign", word("a", lambda p, m, **_: m[3], 3), "dense entry 0 .* is 3, not -1"),
    ("dense-miss", word("a", lambda p, m, **_: m[3] + 1, -1), "number 1 has dense entry -1"),
    ("msg-subtree", word("a", lambda p, m, **_: m[5] + 2, 7), "subtree list at aux"),
    ("field-subtree", fw("value.customer", 9, 0), r"field 8 \(value.customer\): subtree list"),
    ("number-zero", fw("value.id", 0, 0), "number 0 is outside"),
    ("number-twice", fw("value.customer", 0, 1), "number 1 is field 7 .*'s too"),
    ("flags", fw("value.id", 4, 64), "flags 64"),
    ("map-not-message", fw("value.nums[]", 4, 1 | 32), "a map on a field that is not a repeated message"),
    ("map-singular", fw("value.inner", 4, 32), "a map on a field that is not a repeated message"),
    ("column-range", fw("value.id", 2, 99), "column column 99 is out of range"),
    ("column-parent", fw("value.customer", 2, 6), "column 6 is not a child of its message's struct column 0"),
    ("list", fw("value.nums[]", 3, 16), "not a LIST whose one child is its item column 16"),
    ("repeated-emit", fw("value.nums[]", 4, 1 | 4), "emitted zero on a repeated field"),
    ("singular-item", fw("value.customer", 3, 3), "singular field's item column 3 is not its column 2"),
    ("default-message", fw("value.at", 4, 2 | 16), "on type 30, not a scalar"),
    ("wrapped", fw("value.maybe", 6, 14), "wrapped type 14"),
    ("type", fw("value.customer", 1, 10), "type 10 is not one the kernel decodes"),
    ("width-of-type", fw("value.id", 1, 5), "type 5 writes kind 2 width 4, but item column 1 is kind 2 width 8"),
    ("kind-of-type", fw("value.id", 1, 9), "type 9 writes kind 3"),
    ("child-range", fw("value.inner", 5, 9), "child message 9 is out of range"),
    ("child-column", fw("value.inner", 5, 1), "child message 1's struct column 5 is not the field's item column 24"),
    ("enum-aux", fw("value.status", 5, lambda p, a, **_: len(a) - 1), "enum table aux"),
    ("enum-consts", aux_of("value.status", 5, 4, 1000), "enum name 0 consts"),
    ("enum-prefix", aux_of("value.status", 5, 2, 65), "enum prefix of 65 bytes"),
    ("default-aux", both(fw("value.customer", 4, 2 | 16), fw("value.customer", 6, lambda p, a, **_: len(a))),
     "default aux"),
    ("default-consts", both(fw("value.customer", 4, 2 | 16), fw("value.customer", 6, lambda p, a, **_: len(a)),
                            lambda p, m, f, a, cd: a.extend([5000, 3])), "default consts"),
    ("oneof-aux", fw("value.card", 7, lambda p, a, **_: len(a)), "oneof siblings aux"),
    ("oneof-foreign", aux_of("value.card", 7, 0, 0), "oneof sibling 0 is not another singular field"),
    ("oneof-self", aux_of("value.card", 7, 0, lambda p, **_: field_of(p, "value.card")),
     "oneof sibling 16 is not another"),
    ("written-twice", both(fw("value.customer", 2, 18), fw("value.customer", 3, 18),
                           fw("value.customer", 9, lambda p, f, **_: f[FIELD * field_of(p, "value.card") + 9])),
     "column 18 is written by field 8 .* too"),
    ("written-by-none", lambda p, m, f, a, cd: cd.extend([2, 8, 0, 1]),
     "column 28 under its struct column 0 is written by none of its fields"),
]


@pytest.mark.parametrize(("rule", "breaks", "reason"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_program_is_refused(order: ProtoProgram, rule: str, breaks: Any, reason: str) -> None:
    msgs, fields, aux, consts, coldesc = (a.tolist() for a in order.arrays())
    verify_proto(msgs, fields, aux, consts, coldesc, paths=order.paths)  # the untouched program passes
    breaks(order, msgs, fields, aux, coldesc)
    with pytest.raises(ProgramError, match=reason):
        verify_proto(msgs, fields, aux, bytes(consts), coldesc, paths=order.paths)


def test_the_kernel_starts_records_only_at_the_root(order: ProtoProgram) -> None:
    # a verified program is laid out from its root: a record started at another message would give
    # that message's columns rows their parents never get
    import numpy as np

    from kbatch.values.protobuf._protokernel import run

    one = np.zeros(1, np.int64)
    for entry in (1, -2):
        with pytest.raises(ValueError, match="entry or"):
            run(*order.arrays(), np.zeros(8, np.uint8), one, one, np.array([entry], np.int32))
    columns, errors, done = run(*order.arrays(), np.zeros(8, np.uint8), one, one, np.array([0], np.int32))
    assert done == 1 and len(errors) == 0 and len(columns) == len(order.layout.columns)
