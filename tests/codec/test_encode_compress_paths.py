"""The encoder's own compressed paths equal kbatch.codec._compression byte for byte.

zstd batches compressed in C (libzstd's ZSTD_compressCCtx, no GIL) equal python-zstandard's,
on one thread and on two, from plain lists (records written up front), snapshots (written
batch by batch) and Arrow columns; bad levels still fail the way _compression says. snappy
batches' payloads equal _compression's xerial streams."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
from support.twocores import PLAN_RECORDS, make_records

import kbatch
from kbatch.arrow import encode_arrow
from kbatch.codec import _compression
from kbatch.codec import _core as core

needs_zstd_in_c = pytest.mark.skipif(not core._zstd_encode_in_c(), reason="libzstd not found in zstandard._cffi")


@contextlib.contextmanager
def _python_zstd_only() -> Iterator[None]:
    core._zstd_encode_in_c(False)
    try:
        yield
    finally:
        core._zstd_encode_in_c(True)


def _both(monkeypatch: pytest.MonkeyPatch, encode, *args, **kwargs):  # type: ignore[no-untyped-def]
    """The encode through _compression, then in C on one core and on two."""
    with _python_zstd_only():
        reference = encode(*args, **kwargs)
    outs = []
    for cpus in (1, 2):
        with monkeypatch.context() as m:
            m.setattr(core, "_CPUS", cpus)
            outs.append(encode(*args, **kwargs))
    return reference, outs


@needs_zstd_in_c
@pytest.mark.parametrize("level", [None, 1, 3, 9, -5])
@pytest.mark.parametrize("n", [1, 700, PLAN_RECORDS])
def test_plain_lists_equal_python_codec(monkeypatch: pytest.MonkeyPatch, level: int | None, n: int) -> None:
    values, keys, timestamps, headers = make_records(n)
    reference, outs = _both(
        monkeypatch, kbatch.encode, values, keys, timestamps=timestamps, headers=headers,
        max_batch_records=500, compression="zstd", compression_level=level,
    )  # fmt: skip
    assert outs == [reference, reference]
    table = kbatch.decode(outs[1])
    assert table.values() == values and table.keys() == keys


@needs_zstd_in_c
def test_snapshot_path_equals_python_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    # memoryview items are not plain: the encoder snapshots the inputs and writes each
    # batch's records into a scratch buffer on the thread that compresses it
    values, keys, timestamps, _ = make_records(PLAN_RECORDS)
    views = [memoryview(v) for v in values]
    reference, outs = _both(
        monkeypatch, kbatch.encode, views, keys, timestamps=timestamps, max_batch_records=300, compression="zstd"
    )
    assert outs == [reference, reference]
    assert kbatch.decode(outs[0]).values() == values


@needs_zstd_in_c
def test_arrow_columns_equal_python_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    values, keys, timestamps, _ = make_records(PLAN_RECORDS)
    table = pa.table({"value": values, "key": keys, "timestamp": timestamps})
    reference, outs = _both(
        monkeypatch, encode_arrow, table, max_batch_records=500, compression="zstd", compression_level=2
    )
    assert outs == [reference, reference]


@needs_zstd_in_c
def test_one_big_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    values, *_ = make_records(PLAN_RECORDS)
    reference, outs = _both(monkeypatch, kbatch.encode, values, timestamps=[0] * len(values), compression="zstd")
    assert outs == [reference, reference]
    assert len(kbatch.decode(outs[0]).batches) == 1


def _outcome(level: object) -> object:
    try:
        return kbatch.encode([b"x" * 40] * 3, timestamps=[1, 2, 3], compression="zstd", compression_level=level)
    except (ValueError, TypeError) as e:
        return type(e), str(e)


@needs_zstd_in_c
@pytest.mark.parametrize("level", [23, -131073, 2.0, True, np.int64(4)])
def test_other_levels_go_through_python_codec(level: object) -> None:
    # out of range (an error) or not a plain int: _compression decides, as before
    with _python_zstd_only():
        expected = _outcome(level)
    assert _outcome(level) == expected
    if level in (23, -131073):
        assert isinstance(expected, tuple) and expected[0] is ValueError


# snappy: each batch's payload must be _compression.compress's xerial stream, byte for byte,
# on one thread and two.


def _payloads(data: bytes) -> list[bytes]:
    batches = kbatch.decode(data).batches
    return [
        data[p + 61 : p + 12 + n]
        for p, n in zip(batches["position"].tolist(), batches["batch_length"].tolist(), strict=True)
    ]


@pytest.mark.parametrize("cpus", [1, 2])
@pytest.mark.parametrize("n", [1, 700, PLAN_RECORDS])
def test_snappy_payloads_are_python_codecs(monkeypatch: pytest.MonkeyPatch, cpus: int, n: int) -> None:
    values, keys, timestamps, headers = make_records(n)
    kwargs = {"keys": keys, "timestamps": timestamps, "headers": headers, "max_batch_records": 500}
    monkeypatch.setattr(core, "_CPUS", cpus)
    plain = kbatch.encode(values, **kwargs)  # type: ignore[arg-type]
    snappy = kbatch.encode(values, compression="snappy", **kwargs)  # type: ignore[arg-type]
    assert [_compression.compress(_compression.SNAPPY, p) for p in _payloads(plain)] == _payloads(snappy)
    assert kbatch.decode(snappy).values() == values


def test_snappy_snapshot_path_and_big_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # memoryview items: records written batch by batch on the compressing thread;
    # 200 KB batches: several 32 KiB blocks each, the last one short
    values, *_ = make_records(PLAN_RECORDS)
    views = [memoryview(v) for v in values]
    monkeypatch.setattr(core, "_CPUS", 2)
    plain = kbatch.encode(views, timestamps=[0] * len(views), max_batch_bytes=200_000)
    snappy = kbatch.encode(views, timestamps=[0] * len(views), max_batch_bytes=200_000, compression="snappy")
    assert [_compression.compress(_compression.SNAPPY, p) for p in _payloads(plain)] == _payloads(snappy)
    assert kbatch.decode(snappy).values() == values


def test_snappy_with_a_level_fails_as_before() -> None:
    with pytest.raises(ValueError, match="snappy has no compression level"):
        kbatch.encode([b"x"], compression="snappy", compression_level=1)
