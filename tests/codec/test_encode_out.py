"""``encode_arrow(..., out=)`` and ``encode(..., out=)``: the batches written into the caller's buffer.

The bytes must be exactly those of a new ``bytes`` for every codec and on two writer threads;
a ``bytearray`` is resized to fit, any other buffer must be large enough and keeps what lies
past the batches; a buffer that is too small, read-only, non-contiguous or overlapping the
columns is refused before a byte is written; and nothing can resize the buffer while the
writers run without the GIL.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from support.twocores import CODECS, PLAN_RECORDS, make_records, with_cpus

import kbatch

pa = pytest.importorskip("pyarrow")
from kbatch.arrow import encode_arrow  # noqa: E402


def _table(n: int) -> object:
    return pa.table(
        {
            "key": [b"key-%d" % (i % 97) if i % 5 else None for i in range(n)],
            "value": [b"v" * (i % 300) + b"%d" % i for i in range(n)],
            "timestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.timestamp("ms")),
            "headers": pa.array(
                [[{"key": "h", "value": b"%d" % i}] if i % 3 else [] for i in range(n)],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


SMALL = _table(3000)


@pytest.mark.parametrize("codec", CODECS)
def test_into_a_bytearray_equals_new_bytes(codec: str) -> None:
    expect = encode_arrow(SMALL, compression=codec, max_batch_records=500)
    buf = bytearray(b"old")
    n = encode_arrow(SMALL, compression=codec, max_batch_records=500, out=buf)
    assert n == len(expect) == len(buf)
    assert bytes(buf) == expect


def test_a_reused_bytearray_grows_and_shrinks_to_each_output() -> None:
    buf = bytearray()
    for n in (3000, 10, 5000, 1):
        t = SMALL if n == 3000 else _table(n)
        written = encode_arrow(t, out=buf, base_offset=n)
        assert written == len(buf)
        assert bytes(buf) == encode_arrow(t, base_offset=n)
        assert int(kbatch.decode(buf).records["offset"][0]) == n


@pytest.mark.parametrize("kind", ["numpy", "mmap", "memoryview"])
@pytest.mark.parametrize("codec", ["none", "zstd", "gzip"])
def test_into_a_larger_buffer_leaves_the_rest_alone(kind: str, codec: str) -> None:
    expect = encode_arrow(SMALL, compression=codec)
    size = len(expect) + 1000
    if kind == "numpy":
        target: object = np.full(size, 0xAB, dtype=np.uint8)
        raw = target
    elif kind == "mmap":
        target = mmap.mmap(-1, size)
        target.write(b"\xab" * size)
        raw = np.frombuffer(target, dtype=np.uint8)
    else:
        backing = bytearray(b"\xab" * size)
        target = memoryview(backing)
        raw = np.frombuffer(backing, dtype=np.uint8)
    n = encode_arrow(SMALL, compression=codec, out=target)
    assert n == len(expect)
    assert raw[:n].tobytes() == expect
    assert (raw[n:] == 0xAB).all()
    del raw
    if kind == "mmap":
        target.close()  # type: ignore[attr-defined]  # no export left behind by the call


def test_a_multibyte_numpy_buffer_is_counted_in_bytes() -> None:
    expect = encode_arrow(SMALL)
    target = np.zeros(len(expect) // 8 + 1, dtype=np.int64)
    assert encode_arrow(SMALL, out=target) == len(expect)
    assert target.view(np.uint8)[: len(expect)].tobytes() == expect


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_too_small_is_refused_untouched_with_the_size_needed(codec: str) -> None:
    expect = encode_arrow(SMALL, compression=codec)
    target = np.full(len(expect) - 1, 7, dtype=np.uint8)
    with pytest.raises(ValueError, match=f"out holds {len(expect) - 1:,} bytes; the batches need {len(expect):,}"):
        encode_arrow(SMALL, compression=codec, out=target)
    assert (target == 7).all()


def test_exact_size_fits() -> None:
    expect = encode_arrow(SMALL)
    target = np.empty(len(expect), dtype=np.uint8)
    assert encode_arrow(SMALL, out=target) == len(expect)
    assert target.tobytes() == expect


@pytest.mark.parametrize(
    ("out", "error", "match"),
    [
        (b"x" * 100_000, TypeError, "read-only"),
        ([0] * 10, TypeError, "writable buffer .* got list"),
        (np.zeros((1000, 200), dtype=np.uint8)[:, ::2], ValueError, "C-contiguous"),
    ],
    ids=["bytes", "list", "strided"],
)
def test_not_a_writable_contiguous_buffer(out: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        encode_arrow(SMALL, out=out)


def test_an_exported_bytearray_cannot_be_resized() -> None:
    buf = bytearray(10)
    view = memoryview(buf)
    with pytest.raises(BufferError):
        encode_arrow(SMALL, out=buf)
    view.release()
    assert encode_arrow(SMALL, out=buf) == len(buf)


def test_out_overlapping_the_columns_is_refused() -> None:
    n = 100
    data = np.frombuffer(b"".join(b"value-%03d" % i for i in range(n)), dtype=np.uint8).copy()
    offsets = np.arange(0, 9 * n + 1, 9, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    stamps = np.arange(n, dtype=np.int64)  # (not "now": the same bytes in every call)
    expect = encode_arrow({"value": values, "timestamp": stamps})
    big = np.zeros(len(data) + len(expect), dtype=np.uint8)
    big[: len(data)] = data
    inner = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(big[: len(data)])])
    with pytest.raises(ValueError, match="overlaps the value bytes"):
        encode_arrow({"value": inner, "timestamp": stamps}, out=big)
    assert big[: len(data)].tobytes() == data.tobytes()
    # the part of the same buffer past the values is fine
    assert encode_arrow({"value": inner, "timestamp": stamps}, out=big[len(data) :]) == len(expect)
    assert big[len(data) :].tobytes() == expect


def test_empty_input() -> None:
    buf = bytearray(b"stale")
    assert encode_arrow(pa.table({"value": pa.array([], pa.binary())}), out=buf) == 0
    assert buf == b""


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_two_writer_threads_into_a_bytearray(monkeypatch: pytest.MonkeyPatch, codec: str) -> None:
    big = _table(PLAN_RECORDS)
    expect = encode_arrow(big, compression=codec, max_batch_records=500)
    if codec == "none":
        assert len(expect) > 4 << 20  # PARALLEL_WRITE_MIN_BYTES: the front half on the worker
    buf = bytearray()
    n = with_cpus(monkeypatch, 2, encode_arrow, big, compression=codec, max_batch_records=500, out=buf)
    assert n == len(expect)
    assert bytes(buf) == expect
    # again into the same memory (its pages mapped), one thread
    n = with_cpus(monkeypatch, 1, encode_arrow, big, compression=codec, max_batch_records=500, out=buf)
    assert bytes(buf) == expect


# ---------------------------------------------------------------------------------------------
# kbatch.encode (Python lists, and Arrow columns through encode_arrow)

RECORDS = make_records(3000)


@pytest.mark.parametrize("codec", CODECS)
def test_lists_into_a_bytearray_equal_new_bytes(codec: str) -> None:
    values, keys, timestamps, headers = RECORDS
    kw = {"timestamps": timestamps, "headers": headers, "compression": codec, "max_batch_records": 500}
    expect = kbatch.encode(values, keys, **kw)
    buf = bytearray(b"old")
    assert kbatch.encode(values, keys, **kw, out=buf) == len(expect)
    assert bytes(buf) == expect
    target = np.full(len(expect) + 10, 0xAB, dtype=np.uint8)
    assert kbatch.encode(values, keys, **kw, out=target) == len(expect)
    assert target[: len(expect)].tobytes() == expect
    assert (target[len(expect) :] == 0xAB).all()


def test_lists_the_general_path_into_a_bytearray() -> None:
    # memoryviews and generators: the snapshotting gather, not the GIL window
    values = [memoryview(b"v%d" % i) for i in range(100)]
    buf = bytearray()
    stamps = list(range(100))
    n = kbatch.encode(values, (b"k%d" % i for i in range(100)), timestamps=stamps, out=buf)
    assert bytes(buf) == kbatch.encode([bytes(v) for v in values], [b"k%d" % i for i in range(100)], timestamps=stamps)
    assert n == len(buf)


def test_lists_on_two_writer_threads_into_a_bytearray(monkeypatch: pytest.MonkeyPatch) -> None:
    values, keys, timestamps, headers = make_records(PLAN_RECORDS)
    kw = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500}
    expect = kbatch.encode(values, keys, **kw)
    assert len(expect) > 4 << 20
    buf = bytearray()
    assert with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kw, out=buf) == len(expect)
    assert bytes(buf) == expect


def test_lists_too_small_and_legacy() -> None:
    values = [b"x" * 100] * 10
    need = len(kbatch.encode(values))
    with pytest.raises(ValueError, match=f"the batches need {need:,}"):
        kbatch.encode(values, out=np.zeros(need - 1, dtype=np.uint8))

    class Buf(bytearray):
        pass

    with pytest.raises(ValueError, match=f"out holds 5 bytes; the batches need {need:,}"):
        kbatch.encode(values, out=Buf(5))  # a subclass is not resized
    with pytest.raises(ValueError, match="magic 1 message sets have no out"):
        kbatch.encode(values, magic=1, out=bytearray())
    with pytest.raises(TypeError, match="read-only"):
        kbatch.encode(values, out=b"x" * 10_000)


def test_encode_of_arrow_columns_passes_out_on() -> None:
    buf = bytearray()
    assert kbatch.encode(SMALL, out=buf) == len(buf)
    assert bytes(buf) == encode_arrow(SMALL)
