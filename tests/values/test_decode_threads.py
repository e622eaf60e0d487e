"""``values.decode(threads=N)``: the table cut into parts decoded at once (the kernel runs
without the GIL); the same output as one thread, errors included."""

from __future__ import annotations

import pytest
from support.avro_values import framed, registry_of, table_of, write

from kbatch import values
from kbatch.values import ValueDecodeError
from kbatch.values._decode import MIN_RECORDS_PER_THREAD

pytest.importorskip("fastavro")

SCHEMA = {"type": "record", "name": "R", "fields": [
    {"name": "n", "type": "long"}, {"name": "s", "type": "string"},
    {"name": "xs", "type": {"type": "array", "items": ["null", "int"]}}]}  # fmt: skip
N = 2 * MIN_RECORDS_PER_THREAD + 77


def _values() -> list[bytes | None]:
    vals: list[bytes | None] = [framed(1, write(SCHEMA, {"n": i, "s": "x" * (i % 9), "xs": [i, None] * (i % 3)}))
                                for i in range(N)]
    for bad in (5, N // 2 + 3, N - 2):  # a truncated body in the first part, the second, the last
        body = vals[bad]
        assert body is not None
        vals[bad] = body[:-1]
    vals[N // 2 + 10] = None
    return vals


@pytest.mark.parametrize("threads", [2, 3, 0])
def test_threads_give_the_same_table_as_one(threads: int) -> None:
    table = table_of(_values())
    one = values.decode(table, registry_of(SCHEMA), errors="null")
    many = values.decode(table, registry_of(SCHEMA), errors="null", threads=threads)
    assert many.equals(one)
    errors = many.column("value_error").to_pylist()
    assert [i for i, e in enumerate(errors) if e] == [5, N // 2 + 3, N - 2]


def test_two_threads_leave_two_chunks_not_a_copy() -> None:
    out = values.decode(table_of(_values()), registry_of(SCHEMA), errors="null", threads=2)
    assert out.column("value").num_chunks == 2
    assert out.column("value").type == values.decode(table_of(_values()[:1]), registry_of(SCHEMA)).column("value").type


def test_a_small_table_is_not_cut() -> None:
    out = values.decode(table_of(_values()[:100]), registry_of(SCHEMA), errors="null", threads=2)
    assert out.column("value").num_chunks == 1


def test_the_first_error_is_raised_whichever_part_it_is_in() -> None:
    vals = _values()
    vals[5] = vals[6]
    with pytest.raises(ValueDecodeError) as two:
        values.decode(table_of(vals), registry_of(SCHEMA), threads=2)
    with pytest.raises(ValueDecodeError) as one:
        values.decode(table_of(vals), registry_of(SCHEMA))
    assert str(two.value) == str(one.value) and two.value.offset == N // 2 + 3


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_threads_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="threads must be"):
        values.decode(table_of(_values()[:1]), registry_of(SCHEMA), threads=bad)  # type: ignore[arg-type]
