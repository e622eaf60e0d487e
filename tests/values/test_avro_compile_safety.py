"""Programs that stay inside their arrays on valid and corrupt data alike (issue 34): the
compiler's one rollback undoes everything it queued, schema sizes are bounded before any
arithmetic, and an array or map block whose byte size disagrees with its items is an error row.

A decode that used to crash the interpreter runs in a subprocess here, so that the old code
fails the test instead of killing pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from support.avro_values import framed, registry_of, table_of, write

from kbatch import values
from kbatch.values import AvroSchemaError, Schema
from kbatch.values.avro._compile import AvroProgram
from kbatch.values.avro._schema import parse_avro_schema

fastavro = pytest.importorskip("fastavro")


def record(name: str, fields: list[dict]) -> dict:
    return {"type": "record", "name": name, "fields": fields}


#: Issue 34's minimal case: an optional array of records whose reader adds a field with a default.
WRITER = record("R", [{"name": "f", "type": ["null", {"type": "array", "items": record("I", [
    {"name": "b", "type": "boolean"}])}]}])
READER = record("R", [{"name": "f", "type": ["null", {"type": "array", "items": record("I", [
    {"name": "d", "type": "bytes", "default": "z"}])}]}])
#: The sibling: a reader whose record drops the writer's recursive field.
NODE_WRITER = record("R", [{"name": "f", "type": ["null", record("N", [{"name": "next", "type": ["null", "N"]}])]}])
NODE_READER = record("R", [{"name": "f", "type": ["null", record("N", [])]}])


def subprocess_env() -> dict[str, str]:
    """The environment of a child interpreter importing this kbatch and the tests' support."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(values.__file__))))
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root, tests]))


def in_subprocess(writer: dict, reader: dict, bodies: list[bytes], **kw: object) -> list[object]:
    """``values.decode`` of these bodies (framed with id 1) in a fresh interpreter: its rows and
    errors as JSON, or the test fails with how the interpreter died."""
    script = textwrap.dedent(f"""
        import json, sys
        from support.avro_values import framed, registry_of, table_of
        from kbatch import values
        bodies = [bytes.fromhex(h) for h in {[b.hex() for b in bodies]!r}]
        out = values.decode(table_of([framed(1, b) for b in bodies]), registry_of({writer!r}),
                            reader_schema=json.dumps({reader!r}), errors="null", **{kw!r})
        rows = out.column("value").to_pylist()
        errs = out.column("value_error").to_pylist()
        print(json.dumps([[r if not isinstance(r, dict) else repr(r), e] for r, e in zip(rows, errs)]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=subprocess_env())
    assert done.returncode == 0, f"the decode died ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_an_optional_array_of_records_gaining_a_default_field_decodes() -> None:
    body = bytes.fromhex("020A010001010100")  # f: branch 1, 5 items of b, the end
    rows = in_subprocess(WRITER, READER, [body])
    assert rows == [[repr({"f": [{"d": b"z"}] * 5}), None]]


def test_the_compiler_queues_nothing_for_code_it_took_back() -> None:
    p = AvroProgram(parse_avro_schema(Schema(json.dumps(READER))))
    p.add_writer(parse_avro_schema(Schema(json.dumps(WRITER))))
    array = next(ins for ins in p.code if ins[0] == 18)  # ARRAY
    assert array[1] == 1  # the list column, not a subroutine's address
    assert bytes(p.consts) == b"\x02z"  # the default encoded once, not once per attempt


def test_a_record_dropping_a_recursive_field_keeps_its_union_s_branch_count() -> None:
    p = AvroProgram(parse_avro_schema(Schema(json.dumps(NODE_READER))))
    p.add_writer(parse_avro_schema(Schema(json.dumps(NODE_WRITER))))
    unions = [ins for ins in p.code if ins[0] == 4]  # UNION
    assert unions and all(ins[1] == 2 for ins in unions)
    good = write(NODE_WRITER, {"f": {"next": {"next": None}}})
    bad = bytes([2, 4])  # f: branch 1; next: branch 2 of a 2-branch union
    rows = in_subprocess(NODE_WRITER, NODE_READER, [good, bad])
    assert rows[0] == [repr({"f": {}}), None]
    assert rows[1][0] is None and "union branch index out of range" in rows[1][1] and "value.f.next" in rows[1][1]


def fixed(size: int, **logical: object) -> dict:
    return record("R", [{"name": "x", "type": {"type": "fixed", "name": "F", "size": size, **logical}}])


@pytest.mark.parametrize("size", [2**31, 2**40])
def test_a_fixed_larger_than_an_int_is_a_schema_error_naming_it(size: int) -> None:
    with pytest.raises(AvroSchemaError, match=r"fixed 'F' needs a size from 0 to 2147483647"):
        values.decode(table_of([framed(1, b"")]), registry_of(fixed(size)))


def test_a_fixed_of_an_int_s_size_compiles() -> None:
    """The largest size compiles (its int32 operands fit), an array of two of them too: an item's
    least size is bounded, not summed past int32."""
    big = 2**31 - 1
    schema = record("R", [{"name": "x", "type": {"type": "array", "items": record("P", [
        {"name": "a", "type": {"type": "fixed", "name": "F", "size": big}},
        {"name": "b", "type": "F"}])}}])
    out = values.decode(table_of([framed(1, b"\x00")]), registry_of(schema), errors="null")
    assert out.column("value").to_pylist() == [{"x": []}]


def test_a_decimal_fixed_of_2_31_bytes_is_refused_at_once() -> None:
    """It used to compute 2**(8 * size - 1) (hang): run in a subprocess bounded by a timeout."""
    script = textwrap.dedent(f"""
        from support.avro_values import framed, registry_of, table_of
        from kbatch import values
        schema = {fixed(2**31, logicalType="decimal", precision=10)!r}
        try:
            values.decode(table_of([framed(1, b"")]), registry_of(schema))
        except values.AvroSchemaError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=subprocess_env())
    assert "fixed 'F' needs a size from 0 to 2147483647" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(("size", "most"), [(1, 2), (2, 4), (4, 9), (8, 18), (16, 38), (17, 40)])
def test_a_decimal_fixed_s_precision_bound_is_java_s_and_fastavro_s(size: int, most: int) -> None:
    from kbatch.values.avro._schema import parse_avro

    assert parse_avro(fixed(size, logicalType="decimal", precision=most)).fields[0].type.logical == "decimal"
    assert parse_avro(fixed(size, logicalType="decimal", precision=most + 1)).fields[0].type.logical is None
    fastavro.parse_schema(fixed(size, logicalType="decimal", precision=most))
    with pytest.raises(fastavro.schema.SchemaParseException):
        fastavro.parse_schema(fixed(size, logicalType="decimal", precision=most + 1))


LISTS = record("R", [{"name": "a", "type": {"type": "array", "items": "int"}},
                     {"name": "m", "type": {"type": "map", "values": "long"}}])


def blocks(count: int, size: int, items: bytes) -> bytes:
    """An array or map block of ``count`` items written with a negative count and a byte size."""
    return write({"type": "long"}, -count) + write({"type": "long"}, size) + items


DIFFERS = "block's byte size differs from the bytes of its items"


@pytest.mark.parametrize(("sizes", "reason"), [
    ((3, 3), DIFFERS), ((1, 3), DIFFERS), ((0, 3), DIFFERS), ((2, 4), DIFFERS), ((2, 2), DIFFERS),
    ((2, 5), "truncated value"), ((99, 3), "truncated value")])  # fmt: skip
def test_a_block_s_byte_size_must_be_the_bytes_of_its_items(sizes: tuple[int, int], reason: str) -> None:
    """Java Avro and fastavro may skip a block by its size: a size that is not its items' bytes
    (corrupt) is an error for the record naming the field, never a value other readers differ on."""
    a_size, m_size = sizes
    body = blocks(2, a_size, b"\x02\x04") + b"\x00" + blocks(1, m_size, b"\x02k\x06") + b"\x00"
    good = blocks(2, 2, b"\x02\x04") + b"\x00" + blocks(1, 3, b"\x02k\x06") + b"\x00"
    assert fastavro.schemaless_reader(__import__("io").BytesIO(good), fastavro.parse_schema(LISTS), None) == \
        {"a": [1, 2], "m": {"k": 3}}
    out = values.decode(table_of([framed(1, good), framed(1, body)]), registry_of(LISTS), errors="null")
    rows, errs = out.column("value").to_pylist(), out.column("value_error").to_pylist()
    assert rows[0] == {"a": [1, 2], "m": [("k", 3)]} and errs[0] is None
    assert rows[1] is None
    assert f"{reason}" in errs[1] and ("at value.a" if a_size != 2 else "at value.m") in errs[1], errs[1]
