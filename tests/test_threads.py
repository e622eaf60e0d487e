"""The second core: decode's parse thread, parallel compression, and what stays safe.

Every test runs the same input once with ``_CPUS = 1`` (everything on the calling
thread) and once with two cores usable, and asks for identical results: tables
column by column, errors field by field (their ``partial`` tables included), and
encoded bytes byte for byte. The inputs are large enough for the threaded paths to be
taken (compressed decodes, compressed encodes over 1 MiB, uncompressed encodes over 4 MiB),
or the thresholds are lowered so that they are (uncompressed decodes, split by batches).
"""

from __future__ import annotations

import contextlib
import gc
import os
import struct
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kbatch
from kbatch import KBatchError
from kbatch import _core as core

N = 6000  # records: ~0.8 MB uncompressed, 12 batches of 500
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(n: int = N) -> tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]:
    values = [b'{"i": %d, "pad": "%s"}' % (i, b"x" * (i % 170)) for i in range(n)]
    keys = [b"key-%d" % (i * 7919 % 1000) for i in range(n)]
    timestamps = [1_700_000_000_000 + i for i in range(n)]
    headers = [[("h", b"%d" % i)] if i % 3 else [] for i in range(n)]
    return values, keys, timestamps, headers


@pytest.fixture(scope="module")
def records() -> tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]:
    return _records()


@pytest.fixture(scope="module")
def encoded(records) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    values, keys, timestamps, headers = records
    return {
        c: kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500, compression=c)
        for c in CODECS
    }


def _with_cpus(monkeypatch: pytest.MonkeyPatch, n: int, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(core, "_CPUS", n)
        # 16 KiB chunks: every compressed input here is several chunks, so the parse
        # thread has work to overlap and errors to order (the same chunks inline).
        m.setattr(core, "_CHUNK_BYTES", 16384)
        # and every uncompressed input is parsed from both ends at once
        m.setattr(core, "_SPLIT_BYTES", 16384)
        return fn(*args, **kwargs)


def _same_table(a: kbatch.RecordTable, b: kbatch.RecordTable) -> None:
    assert np.array_equal(a.records, b.records)
    assert np.array_equal(a.batches, b.batches)
    assert np.array_equal(a.headers, b.headers)
    assert bytes(memoryview(a.data)) == bytes(memoryview(b.data))
    assert (a.consumed_bytes, a.truncated, a.next_offset) == (b.consumed_bytes, b.truncated, b.next_offset)


def _outcome(monkeypatch: pytest.MonkeyPatch, n_cpus: int, data: bytes, decode=kbatch.decode, **kwargs):  # type: ignore[no-untyped-def]
    try:
        return _with_cpus(monkeypatch, n_cpus, decode, data, **kwargs), None
    except KBatchError as e:
        return None, e


def _same_outcome(monkeypatch: pytest.MonkeyPatch, data: bytes, **kwargs) -> KBatchError | None:
    (t1, e1), (t2, e2) = (_outcome(monkeypatch, c, data, **kwargs) for c in (1, 2))
    if e1 is None:
        assert e2 is None, e2
        _same_table(t1, t2)
        return None
    assert e2 is not None and type(e1) is type(e2), (e1, e2)
    assert str(e1) == str(e2)
    assert (e1.position, e1.batch_index, e1.field) == (e2.position, e2.batch_index, e2.field)
    _same_table(e1.partial, e2.partial)
    return e1


@pytest.mark.parametrize("codec", CODECS)
def test_threaded_decode_equals_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], records, codec: str
) -> None:
    data = encoded[codec]
    assert _same_outcome(monkeypatch, data) is None
    t = kbatch.decode(data)
    assert t.values() == records[0]
    assert len(t.batches) == N // 500


def _batch_starts(data: bytes) -> list[int]:
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return starts


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("which", [0, 1, 5, -1])
@pytest.mark.parametrize("verify_crc", [True, False])
def test_threaded_decode_errors_equal_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], codec: str, which: int, verify_crc: bool
) -> None:
    data = bytearray(encoded[codec])
    starts = _batch_starts(bytes(data))
    k = which % len(starts)
    # A byte in the middle of batch k's records: a CRC mismatch with verify_crc, else
    # (mostly) a parse or decompression error in that batch.
    end = starts[k + 1] if k + 1 < len(starts) else len(data)
    data[(starts[k] + 61 + end) // 2] ^= 0x5A
    err = _same_outcome(monkeypatch, bytes(data), verify_crc=verify_crc)
    if verify_crc:
        assert err is not None and err.batch_index == k
    if err is not None:
        assert err.batch_index <= k  # nothing after the damage is blamed
        assert len(err.partial.batches) == err.batch_index


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_parse_error_in_one_chunk_beats_crc_error_in_the_next(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded, codec: str
) -> None:
    # Batch 1 parses badly (its CRC made to match), batch 11's CRC is wrong: the
    # parse thread's error (earlier) must win although the calling thread finds the
    # CRC error while batch 1 is still being parsed.
    data = bytearray(encoded[codec])
    starts = _batch_starts(bytes(data))
    count_at = starts[1] + 57
    struct.pack_into(">i", data, count_at, struct.unpack_from(">i", data, count_at)[0] - 1)  # one record too many
    end = starts[2]
    struct.pack_into(">I", data, starts[1] + 17, core._crc32c(bytes(data[starts[1] + 21 : end])))
    data[starts[11] + 30] ^= 1  # in batch 11's header, under its CRC
    err = _same_outcome(monkeypatch, bytes(data))
    assert err is not None and err.batch_index == 1 and err.field == "records"


@pytest.mark.parametrize("back_first", [0, 4, 12])
@pytest.mark.parametrize(
    "damage", [None, "crc 0", "crc 10", "crc 11 parse 3", "parse 10", "parse 2 parse 9", "count 7 crc 7"]
)
@pytest.mark.parametrize("verify_crc", [True, False])
def test_split_decode_equals_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded, records, back_first: int, damage: str | None, verify_crc: bool
) -> None:
    # Uncompressed input parsed from both ends: the calling thread first takes
    # ``back_first`` batches from the back (all 12: the parse thread gets none), so
    # the back's headers are certainly moved behind the front's. Damage: a CRC
    # mismatch, a parse error (its CRC made to match) or a record count the batch
    # cannot hold, at the batches named; the earliest must win, a CRC error first.
    monkeypatch.setattr(core, "_SPLIT_BACK_FIRST", back_first)
    data = bytearray(encoded["none"])
    starts = _batch_starts(bytes(data))
    ends = [*starts[1:], len(data)]
    words = (damage or "").split()
    for kind, k in zip(words[::2], map(int, words[1::2]), strict=True):
        if kind == "crc":
            data[starts[k] + 30] ^= 1
        elif kind == "parse":
            data[starts[k] + 61] ^= 0x40  # the first record's length
            struct.pack_into(">I", data, starts[k] + 17, core._crc32c(bytes(data[starts[k] + 21 : ends[k]])))
        else:
            struct.pack_into(">i", data, starts[k] + 57, 10**6)
    err = _same_outcome(monkeypatch, bytes(data), verify_crc=verify_crc)
    expect = None
    if damage is not None:
        hits = [int(k) for kind, k in zip(words[::2], words[1::2], strict=True) if verify_crc or kind != "crc"]
        expect = min(hits) if hits else None
    if expect is None:
        assert err is None
        t = core.decode(bytes(data), verify_crc=verify_crc)
        assert t.values() == records[0]
        assert [h for i in range(len(t)) for h in t.headers(i)] == [h for hs in records[3] for h in hs]
    else:
        assert err is not None and err.batch_index == expect
        assert isinstance(err, kbatch.CRCError) == (verify_crc and f"crc {expect}" in damage)
        n = expect * 500
        assert err.partial.values() == records[0][:n]
        assert [h for i in range(n) for h in err.partial.headers(i)] == [h for hs in records[3][:n] for h in hs]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=3),
    back_first=st.integers(0, 12),
    verify_crc=st.booleans(),
)
def test_split_decode_of_damaged_input_equals_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded, flips: list[tuple[float, int]], back_first: int, verify_crc: bool
) -> None:
    # Any bytes flipped anywhere: two threads and one agree on the error (or its
    # absence) and on every row before it.
    data = bytearray(encoded["none"])
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    with monkeypatch.context() as m:
        m.setattr(core, "_SPLIT_BACK_FIRST", back_first)
        _same_outcome(m, bytes(data), verify_crc=verify_crc)


def test_arena_pages_are_reused_but_never_shared(encoded: dict[str, bytes], records) -> None:  # type: ignore[no-untyped-def]
    data = encoded["lz4"]
    first = kbatch.decode(data)
    kept = np.array(first.data, copy=True)
    second = kbatch.decode(data)  # ``first`` still alive: its arena is not the spare
    assert np.shares_memory(np.asarray(first.data), np.asarray(second.data)) is False
    addr = np.asarray(first.data).ctypes.data
    del first
    gc.collect()
    third = kbatch.decode(data)  # takes the freed arena's pages
    assert np.asarray(third.data).ctypes.data == addr
    assert np.array_equal(np.asarray(third.data), kept)
    assert third.values() == records[0] == second.values()
    core._release_spare()


def test_spare_blocks_keep_the_largest() -> None:
    # Arenas of three decodes in turn (as a benchmark decoding gzip, snappy, then lz4
    # does): the newest, largest one must be kept even past the 256 MiB of spares, the
    # smaller ones making room, or every later decode would fault in fresh pages.
    core._release_spare()
    mib = 1 << 20
    for size in (70 * mib, 112 * mib, 113 * mib):
        block = core._arena_block(size)  # (untouched: no page is mapped)
        del block  # back to the spares
    assert core._spare_sizes() == [113 * mib, 112 * mib]  # 70 + 112 + 113 MiB > 256 MiB
    again = core._arena_block(100 * mib)  # the smallest spare that fits
    assert core._spare_sizes() == [113 * mib]
    del again
    core._arena_block(300 * mib)  # over the limit itself: freed, the spares kept
    assert core._spare_sizes() == [113 * mib, 112 * mib]
    core._release_spare()
    live = [core._arena_block(size * mib) for size in (1, 2, 3, 4, 5)]
    del live  # at most four spares: the smallest goes
    assert core._spare_sizes() == [5 * mib, 4 * mib, 3 * mib, 2 * mib]
    core._release_spare()
    assert core._spare_sizes() == []


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_parallel_compression_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch, codec: str) -> None:
    values, keys, timestamps, headers = _records(2 * N)  # > 1 MiB uncompressed: two threads
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500, "compression": codec}
    one = _with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = _with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
    assert one == two
    assert kbatch.decode(two).values() == values


def test_parallel_compression_raises_codec_errors(monkeypatch: pytest.MonkeyPatch, records) -> None:  # type: ignore[no-untyped-def]
    values = records[0]
    with pytest.raises(ValueError, match="level"):
        _with_cpus(
            monkeypatch, 2, kbatch.encode, values, compression="gzip", compression_level=12, max_batch_records=500
        )


def test_encode_falls_back_to_snapshots_midway(records) -> None:  # type: ignore[no-untyped-def]
    # The plain path runs until record 5000, finds a bytearray, and starts again
    # the general way: same bytes as all-bytes input.
    values, keys, timestamps, headers = records
    plain = kbatch.encode(values, keys, timestamps=timestamps, headers=headers)
    mixed = list(values)
    mixed[5000] = bytearray(values[5000])
    hdrs = list(headers)
    hdrs[4000] = [["h", b"4000"]]  # a list pair, not a tuple
    assert kbatch.encode(mixed, keys, timestamps=timestamps, headers=hdrs) == plain
    assert kbatch.encode(tuple(values), tuple(keys), timestamps=np.array(timestamps), headers=headers) == plain


def test_python_code_run_while_gathering_cannot_free_an_item() -> None:
    values = [bytes([65 + i % 26]) * 200 for i in range(3000)]
    expect = list(values)

    class Stamp:
        # Runs while record 2500 is gathered: empties the caller's list, which
        # would free every value gathered so far without the snapshot.
        def __int__(self) -> int:
            values.clear()
            gc.collect()
            return 1_700_000_000_000

    timestamps: list[object] = [1_700_000_000_000] * 3000
    timestamps[2500] = Stamp()
    data = kbatch.encode(values, timestamps=timestamps)
    assert values == []
    assert kbatch.decode(data).values() == expect


@pytest.mark.parametrize(("env", "expect"), [("1", 1), ("3", 3), ("0", 1), ("many", None)])
def test_kbatch_threads_sets_the_cores_used(monkeypatch: pytest.MonkeyPatch, env: str, expect: int | None) -> None:
    monkeypatch.setenv("KBATCH_THREADS", env)
    default = len(os.sched_getaffinity(0))
    assert core._usable_cpus() == (default if expect is None else expect)


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("keep", [True, False])
def test_threaded_decode_with_skipped_batches(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], records, codec: str, keep: bool
) -> None:
    data = encoded[codec]
    skip = np.arange(N // 500) % 3 == 1
    # (skip_batches is the log reader's internal hook into the core)
    assert _same_outcome(monkeypatch, data, decode=core.decode, skip_batches=skip, keep_skipped_rows=keep) is None
    kept = [v for i, v in enumerate(records[0]) if not skip[i // 500]]
    assert core.decode(data, skip_batches=skip, keep_skipped_rows=keep).values() == kept


@pytest.mark.parametrize("plain", [True, False])
def test_parallel_write_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch, plain: bool) -> None:
    # > 4 MiB uncompressed: the second half of the batches is written on the worker,
    # from plain lists (GIL held throughout) or from snapshots (a bytearray inside).
    values, keys, timestamps, headers = _records(6 * N)
    if not plain:
        values[-1] = bytearray(values[-1])
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500}
    one = _with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = _with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
    assert len(one) > 4 << 20
    assert one == two
    t = kbatch.decode(two)  # CRCs of both halves checked
    assert t.values() == [bytes(v) for v in values]
    assert t.keys() == keys


def test_set_threads_round_trips_and_rejects_zero() -> None:
    previous = kbatch.set_threads(1)
    try:
        assert kbatch.get_threads() == 1
        assert core._CPUS == 1
        with pytest.raises(ValueError, match=">= 1"):
            kbatch.set_threads(0)
        assert kbatch.set_threads(2) == 1
        assert kbatch.get_threads() == 2
    finally:
        kbatch.set_threads(previous)


def test_plain_gather_edge_items_match_the_general_path() -> None:
    # Items the borrowed-pointer gather takes itself (non-ASCII str keys, None header
    # values, tuples) give the same bytes as the general path (forced by a bytearray).
    values = [b"v%d" % i for i in range(50)]
    headers = [(("clé", None), (b"k", b"x")) if i % 2 else [("ключ", b"y")] for i in range(50)]
    plain = kbatch.encode(values, timestamps=list(range(50)), headers=headers)
    forced = kbatch.encode([*values[:-1], bytearray(values[-1])], timestamps=list(range(50)), headers=headers)
    assert plain == forced
    t = kbatch.decode(plain)
    assert t.record(1).headers == [("clé", None), ("k", b"x")]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timestamps": [2**63]}, OverflowError),
        ({"headers": [[("\udc80", b"x")]]}, UnicodeEncodeError),
        ({"headers": [[(1, b"x")]]}, TypeError),
        ({"headers": [[("k", "str value")]]}, TypeError),
    ],
)
def test_plain_gather_leaves_errors_to_the_general_path(kwargs: dict, error: type) -> None:  # type: ignore[type-arg]
    with pytest.raises(error):
        kbatch.encode([b"v"], **kwargs)


def test_the_worker_thread_starts_and_runs_jobs_here() -> None:
    # (else every "threaded" case above would quietly have run inline)
    assert core._Worker(True).threaded
    assert not core._Worker(False).threaded


def test_compressed_encode_writes_its_raw_halves_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # > 4 MiB uncompressed: the raw block is written in two halves (C worker), then
    # compressed in two halves (Python thread): same bytes as one thread.
    values, keys, timestamps, headers = _records(6 * N)
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500, "compression": "lz4"}
    one = _with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = _with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
    assert one == two
    assert kbatch.decode(two).values() == values


# Planning (which records go in which batch) runs on two threads from 32,768 records
# (PARALLEL_RECORDS_MIN) when record counts set the boundaries: the back half is planned
# as if a batch began at a multiple of max_batch_records, and planned again from the
# front's last batch when that batch could have gone on (a byte limit binding).
PLAN_RECORDS = 40_001


@pytest.mark.parametrize(
    ("max_records", "max_bytes"),
    [
        (500, None),  # counts decide: the split holds
        (333, None),  # a split point that is not half
        (20_000, None),  # the front is exactly one full batch
        (7, None),  # many small batches
        (500, 9_000),  # bytes bind first: planned again from the front's last batch
        (500, 20_000),  # bytes bind now and then
        (50_000, None),  # one batch larger than the split: inline
    ],
)
def test_split_plan_equals_inline(monkeypatch: pytest.MonkeyPatch, max_records: int, max_bytes: int | None) -> None:
    rng = np.random.default_rng(max_records + (max_bytes or 0))
    sizes = rng.integers(0, 60, PLAN_RECORDS)
    values = [b"v" * int(s) for s in sizes]
    timestamps = (1_700_000_000_000 + np.cumsum(rng.integers(0, 300, PLAN_RECORDS))).tolist()
    kwargs = {"timestamps": timestamps, "max_batch_records": max_records, "max_batch_bytes": max_bytes}
    one = _with_cpus(monkeypatch, 1, kbatch.encode, values, **kwargs)
    two = _with_cpus(monkeypatch, 2, kbatch.encode, values, **kwargs)
    assert one == two
    t = kbatch.decode(two)
    assert t.values() == values
    counts = t.batches["record_count"]
    assert counts.max() <= max_records
    if max_bytes is not None:
        assert (t.batches["batch_length"] + 12 <= max_bytes).all()
    assert (counts[:-1] == max_records).all() or max_bytes is not None


def _arrow_columns(n: int) -> dict:  # type: ignore[type-arg]
    pa = pytest.importorskip("pyarrow")
    values, keys, timestamps, headers = _records(n)
    return {
        "value": pa.array(values, pa.binary()),
        "key": pa.array(keys, pa.binary()),
        "timestamp": pa.array(timestamps, pa.timestamp("ms", tz="UTC")),
        "headers": pa.array(
            [[{"key": k, "value": v} for k, v in h] or None for h in headers],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        ),
    }


def test_arrow_columns_gathered_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbatch.arrow import encode_arrow

    cols = _arrow_columns(PLAN_RECORDS)
    one = _with_cpus(monkeypatch, 1, encode_arrow, cols, max_batch_records=500)
    two = _with_cpus(monkeypatch, 2, encode_arrow, cols, max_batch_records=500)
    assert one == two
    values, keys, timestamps, headers = _records(PLAN_RECORDS)
    assert one == kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500)


@pytest.mark.parametrize("where", ["value", "key", "hkey", "hval", "header"])
@pytest.mark.parametrize("record", [5, 30_000])  # in the front half, in the back half
def test_bad_column_offsets_name_the_same_record_on_two_threads(
    monkeypatch: pytest.MonkeyPatch, where: str, record: int
) -> None:
    from kbatch.arrow import from_arrow

    cols = from_arrow(_arrow_columns(PLAN_RECORDS))
    header = int(cols["header_offsets"][record])
    name, at = {
        "value": ("value_offsets", record + 1),
        "key": ("key_offsets", record + 1),
        "hkey": ("hkey_offsets", header + 1),
        "hval": ("hval_offsets", header + 1),
        "header": ("header_offsets", record + 1),
    }[where]
    bad = np.array(cols[name], dtype=np.int64)  # (a copy: int64 whatever the Arrow width)
    bad[at] = bad[at - 1] - 1  # decreases at ``at``
    cols[name] = bad
    if where in ("hkey", "hval") and cols["header_offsets"][record + 1] == header:
        cols["header_offsets"] = np.array(cols["header_offsets"], dtype=np.int64)
        cols["header_offsets"][record + 1 :] += 1  # give the record a header to read
    args = [cols.pop(k) for k in ("value_offsets", "value_data", "value_valid", "key_offsets", "key_data",
                                  "key_valid", "timestamps")]  # fmt: skip
    messages = []
    for cpus in (1, 2):
        with pytest.raises(ValueError, match=f"record {record}: ") as e:
            _with_cpus(monkeypatch, cpus, core.encode_arrays, *args, **cols, max_batch_records=500)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_the_first_bad_record_wins_across_the_two_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbatch.arrow import from_arrow

    cols = from_arrow(_arrow_columns(PLAN_RECORDS))
    bad = np.array(cols["value_offsets"], dtype=np.int64)
    bad[30_001] = -1  # back half: before the data
    bad[9] = bad[10] + 1  # front half: decreases at entry 10, so record 9 is the first bad one
    for cpus in (1, 2):
        with pytest.raises(ValueError, match="record 9: its value offsets"):
            _with_cpus(monkeypatch, cpus, core.encode_arrays, bad, cols["value_data"])


# Compressed chunks on two threads: when every batch of a chunk tells the exact size of
# what it decompresses to (a zstd frame declaring its content size; xerial or raw snappy
# blocks), its pieces are decompressed by the calling thread and a helper thread into
# places reserved in the arena. Anything else goes one batch at a time, as inline.


def _batches(frames: list[bytes]) -> bytes:
    """Batches of 20 records each, their payloads compressed as ``frames`` says:
    zstd "sized" or "stream" (no content size, as Java writes it), snappy "xerial" or "raw",
    gzip "gzip" (one member) or "gzip2" (two members)."""
    import cramjam
    import zstandard

    from kbatch import _compression
    from tests.refcodec import Rec, batch

    out = []
    rng = np.random.default_rng(7)
    for i, kind in enumerate(frames):
        # half random bytes: ~2 KiB per compressed batch, several batches per 16 KiB chunk
        # (gzip: 8 KiB or more uncompressed, below that inflate goes one batch at a time)
        repeat = 8 if kind.startswith(b"gzip") else 2
        raw = b"".join(
            Rec(value=rng.integers(0, 256, 60, dtype=np.uint8).tobytes() * repeat, key=b"k%d" % j).encode(j)
            for j in range(20)
        )
        codec = 4
        if kind == b"sized":
            payload = zstandard.ZstdCompressor(level=3).compress(raw)
        elif kind == b"stream":
            cobj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
            payload = cobj.compress(raw) + cobj.flush()
        elif kind == b"xerial":
            payload, codec = _compression.compress(_compression.SNAPPY, raw), 2
        elif kind == b"gzip":
            payload, codec = _compression.compress(_compression.GZIP, raw), 1
        elif kind == b"lz4":  # Kafka's frame, 64 KiB blocks
            payload, codec = _compression.compress(_compression.LZ4, raw), 3
        elif kind == b"lz4-hc":  # LZ4 HC blocks, and a stored one where it does not pay
            payload, codec = _compression.compress(_compression.LZ4, raw, 12), 3
        elif kind == b"lz4-checksums":  # block and content checksums, a content size (FLG 0x7c)
            import lz4.frame

            payload, codec = lz4.frame.compress(raw, block_checksum=True, content_checksum=True), 3
        elif kind in (b"lz4-size", b"lz4-bc"):  # as kafka-python (a content size), aiokafka (block checksums)
            import lz4.frame

            payload = lz4.frame.compress(
                raw, block_linked=False, store_size=kind == b"lz4-size", block_checksum=kind == b"lz4-bc"
            )
            codec = 3
        elif kind.startswith(b"lz4-") and kind[4:] in _LZ4_BLOCK_SIZES:  # python-lz4's frame, plain
            import lz4.frame

            payload = lz4.frame.compress(
                raw,
                block_size=_LZ4_BLOCK_SIZES[kind[4:]],
                block_linked=False,
                store_size=False,
                content_checksum=False,
            )
            codec = 3
        elif kind == b"gzip2":  # two members: the trailer of the second does not tell the size
            half = len(raw) // 2
            payload = _compression.compress(_compression.GZIP, raw[:half])
            payload, codec = payload + _compression.compress(_compression.GZIP, raw[half:]), 1
        else:  # raw snappy, as librdkafka writes it
            payload, codec = bytes(cramjam.snappy.compress_raw(raw)), 2
        out.append(batch(payload, base_offset=20 * i, record_count=20, last_offset_delta=19, attributes=codec))
    return b"".join(out)


def _lz4_block_sizes() -> dict[bytes, int]:
    import lz4.frame

    return {
        b"64k": lz4.frame.BLOCKSIZE_MAX64KB,
        b"256k": lz4.frame.BLOCKSIZE_MAX256KB,
        b"1m": lz4.frame.BLOCKSIZE_MAX1MB,
        b"4m": lz4.frame.BLOCKSIZE_MAX4MB,
    }


_LZ4_BLOCK_SIZES = _lz4_block_sizes()


def _batch_at(data: bytes | bytearray, k: int) -> tuple[int, int]:
    """(position, batch_length) of batch ``k`` of ``data``; its payload starts at position + 61."""
    batches = kbatch.decode(bytes(data)).batches
    return int(batches["position"][k]), int(batches["batch_length"][k])


def _count_piece_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    run = core._Pieces.run

    def counted(self) -> None:  # type: ignore[no-untyped-def]
        calls.append(len(self.items))
        run(self)

    monkeypatch.setattr(core._Pieces, "run", counted)
    return calls


@pytest.mark.parametrize("codec", ["gzip", "zstd", "snappy"])
def test_chunks_decompress_on_two_threads(
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], codec: str
) -> None:
    calls = _count_piece_runs(monkeypatch)
    (t1, e1), (t2, e2) = (_outcome(monkeypatch, c, encoded[codec]) for c in (1, 2))
    assert e1 is None and e2 is None
    _same_table(t1, t2)
    # every chunk of several batches (16 KiB chunks) took the path; the helper thread runs
    # too unless the calling thread took every piece before it started (then it is cancelled)
    assert len(calls) >= 3


@pytest.mark.parametrize(
    ("plain", "other"),
    [
        (b"sized", b"stream"),
        (b"xerial", b"raw"),
        (b"raw", b"sized"),
        (b"gzip", b"gzip2"),
        (b"sized", b"lz4"),  # lz4: a path of its own (below)
        (b"lz4-hc", b"lz4-checksums"),
    ],
)
def test_chunks_mixing_payloads_decode_as_inline(monkeypatch: pytest.MonkeyPatch, plain: bytes, other: bytes) -> None:
    # zstd frames without a size go one batch at a time; raw and xerial snappy and sized
    # zstd all take the two-thread path, alone or mixed in one chunk
    data = _batches([plain] * 40 + [other] * 40 + [plain, other] * 20)
    calls = _count_piece_runs(monkeypatch)
    (t1, _), (t2, _) = (_outcome(monkeypatch, c, data) for c in (1, 2))
    _same_table(t1, t2)
    assert len(t2.records) == 120 * 20
    if plain.startswith(b"lz4"):
        assert not calls  # lz4 has a path of its own (below)
    else:
        assert calls


@pytest.mark.parametrize("kind", [b"sized", b"xerial", b"gzip", b"lz4"])  # (lz4: its own path, below)
@pytest.mark.parametrize("damage", ["data", "size_claim", "limit"])
def test_chunk_failures_fall_back_to_inline_errors(monkeypatch: pytest.MonkeyPatch, kind: bytes, damage: str) -> None:
    data = bytearray(_batches([kind] * 120))
    k = 77
    pos, length = _batch_at(data, k)
    payload = pos + 61
    kwargs: dict = {"verify_crc": False}  # type: ignore[type-arg]
    if damage == "data" and kind != b"xerial":  # the framing checks out, the codec fails it
        data[pos + 12 + length - 12] ^= 0x5A
    elif damage == "data":  # (snappy has no checksum) a copy reaching before the block's start
        data[pos + 12 + length - 5 : pos + 12 + length] = b"\x03\xff\xff\xff\x7f"
    elif damage == "size_claim" and kind == b"sized":  # content size one larger than the data
        assert data[payload + 4] & 0x20  # single segment: the size follows the descriptor
        data[payload + 5] += 1
    elif damage == "size_claim" and kind == b"xerial":  # the first block's declared length, one larger
        data[payload + 20] += 1
    elif damage == "size_claim" and kind == b"lz4":  # the first block's size, one smaller
        data[payload + 7] -= 1
    elif damage == "size_claim":  # gzip's ISIZE, one larger
        data[pos + 12 + length - 4] ^= 1
    else:  # the arena limit falls inside batch k
        kwargs["max_decompressed_size"] = len(memoryview(kbatch.decode(bytes(data)).data)) * k // 120 + 100
    e = _same_outcome(monkeypatch, bytes(data), **kwargs)
    assert isinstance(e, kbatch.CorruptRecordError)
    assert e.batch_index == k
    assert len(e.partial.records) == k * 20  # every batch before the bad one


# LZ4 frames of independent blocks (FLG 0x60: Java's and librdkafka's; 0x68 kafka-python's,
# 0x70 aiokafka's, 0x7c python-lz4's) are decompressed in C, a chunk's batches from both ends
# on two threads with the gap between them closed afterwards; _compression (one block at a
# time through cramjam, or liblz4's frame decoder for frames with checksums) is the reference
# they must equal, and what they fall back on.


@contextlib.contextmanager
def _python_lz4_only():  # type: ignore[no-untyped-def]
    """Decompress LZ4 through _compression only, inside the block."""
    core._lz4_in_c(False)
    try:
        yield
    finally:
        core._lz4_in_c(True)


@pytest.fixture
def python_lz4():  # type: ignore[no-untyped-def]
    """Decompress LZ4 through _compression only, for the duration of the test."""
    with _python_lz4_only():
        yield


def _lz4_c_chunks() -> int:
    return int(core._lz4_in_c()[1])


def _decoded_three_ways(monkeypatch: pytest.MonkeyPatch, data: bytes, **kwargs):  # type: ignore[no-untyped-def]
    """(table or error) through _compression, then in C on one thread, then on two."""
    with _python_lz4_only():
        reference = _outcome(monkeypatch, 1, data, **kwargs)
    before = _lz4_c_chunks()
    one, two = (_outcome(monkeypatch, c, data, **kwargs) for c in (1, 2))
    return reference, one, two, _lz4_c_chunks() - before


def _fail_alike(results: list, k: int) -> None:  # type: ignore[type-arg]
    """Every ``(table, error)`` of _decoded_three_ways failed at batch ``k``, with the same error."""
    errors = [e for _, e in results]
    for e in errors:
        assert isinstance(e, kbatch.CorruptRecordError) and e.batch_index == k, e
        assert (str(e), e.position, e.field) == (str(errors[0]), errors[0].position, errors[0].field)
        assert len(e.partial.records) == k * 20


def test_lz4_is_decompressed_in_c() -> None:
    # the lz4 package (a dependency) exports liblz4's LZ4_decompress_safe from its extension
    # module on Linux, where kbatch ships wheels: finding it keeps lz4 decodes at codec speed
    if sys.platform != "linux":
        pytest.skip("kbatch ships Linux wheels only; elsewhere lz4 may go through cramjam")
    assert core._lz4_in_c()[0]


@pytest.mark.parametrize(
    "kinds",
    [
        [b"lz4"],
        [b"lz4-hc"],  # HC blocks and stored (uncompressed) ones
        [b"lz4-64k", b"lz4-256k", b"lz4-1m", b"lz4-4m"],  # every block size python-lz4 writes
        # FLG 0x68 (kafka-python), 0x70 (aiokafka), 0x7c (every checksum and a content size)
        [b"lz4-size", b"lz4-bc", b"lz4-checksums", b"lz4"],
    ],
)
def test_lz4_in_c_equals_python(monkeypatch: pytest.MonkeyPatch, kinds: list[bytes]) -> None:
    data = _batches(kinds * (120 // len(kinds)))
    (t0, e0), (t1, e1), (t2, e2), chunks = _decoded_three_ways(monkeypatch, data)
    assert e0 is None and e1 is None and e2 is None
    _same_table(t0, t1)
    _same_table(t0, t2)
    assert len(t0.records) == 120 * 20
    assert chunks >= 2 * 3  # every 16 KiB chunk, twice


def _lz4_frame_fields(payload: bytes) -> tuple[int, int]:
    """(where its first block's size is, where the content size is or -1) in an LZ4 frame."""
    return (15, 6) if payload[4] & 0x08 else (7, -1)


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        (b"lz4-bc", "block checksum"),
        (b"lz4-checksums", "block checksum"),
        (b"lz4-checksums", "content checksum"),
        (b"lz4-checksums", "content size"),  # liblz4's frame decoder holds the output to it
        (b"lz4-size", "content size"),  # without checksums it is skipped, as Java does: decodes
        (b"lz4-size", "descriptor checksum"),
    ],
)
def test_lz4_in_c_checks_what_python_checks(monkeypatch: pytest.MonkeyPatch, kind: bytes, damage: str) -> None:
    from kbatch import _compression

    data = bytearray(_batches([kind] * 120))
    k = 43
    pos, length = _batch_at(data, k)
    payload = pos + 61
    end = pos + 12 + length
    first_block, content_size = _lz4_frame_fields(bytes(data[payload : payload + 16]))
    if damage == "block checksum":  # the last 4 bytes of the first (only) block
        size = struct.unpack_from("<I", data, payload + first_block)[0] & 0x7FFFFFFF
        data[payload + first_block + 4 + size] ^= 0x01
    elif damage == "content checksum":
        data[end - 1] ^= 0x01
    elif damage == "descriptor checksum":
        data[payload + first_block - 1] ^= 0x01
    else:  # one more than the content, with a good descriptor checksum
        claimed = struct.unpack_from("<Q", data, payload + content_size)[0]
        struct.pack_into("<Q", data, payload + content_size, claimed + 1)
        data[payload + first_block - 1] = _compression._lz4_hc(bytes(data[payload + 4 : payload + first_block - 1]))
    results = _decoded_three_ways(monkeypatch, bytes(data), verify_crc=False)[:3]
    if kind == b"lz4-size" and damage == "content size":
        for table, e in results:
            assert e is None
            _same_table(results[0][0], table)
        return
    _fail_alike(results, k)


@pytest.mark.parametrize("skipped", ["some", "all"])
def test_lz4_in_c_with_skipped_batches(monkeypatch: pytest.MonkeyPatch, python_lz4: None, skipped: str) -> None:
    data = _batches([b"lz4", b"lz4-hc"] * 60)
    skip = np.zeros(120, dtype=bool)
    skip[::3] = True
    skip[40:56] = True  # (whole chunks)
    if skipped == "all":  # nothing to decompress: no chunk takes the C path
        skip[:] = True
    want = _outcome(monkeypatch, 1, data, decode=core.decode, skip_batches=skip)[0]
    core._lz4_in_c(True)
    before = _lz4_c_chunks()
    for cpus in (1, 2):
        got = _outcome(monkeypatch, cpus, data, decode=core.decode, skip_batches=skip)[0]
        _same_table(want, got)
    assert (_lz4_c_chunks() - before >= 2 * 3) == (skipped == "some")
    assert len(want.records) == (120 - int(skip.sum())) * 20


def test_lz4_in_c_limit_between_the_bound_and_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # The room reserved is each block's maximum: a limit that the data fits but the bound
    # does not sends the chunk to _compression, which decodes it (and it fails only when
    # the data itself is over the limit)
    data = _batches([b"lz4"] * 120)
    size = len(memoryview(kbatch.decode(data).data))
    (t0, e0), (t1, e1), (t2, e2), _ = _decoded_three_ways(monkeypatch, data, max_decompressed_size=size)
    assert e0 is None and e1 is None and e2 is None
    _same_table(t0, t1)
    _same_table(t0, t2)
    for _, e in _decoded_three_ways(monkeypatch, data, max_decompressed_size=size - 1)[:3]:
        assert isinstance(e, kbatch.CorruptRecordError) and e.batch_index == 119
        assert "max_decompressed_size" in str(e)


@pytest.mark.parametrize("byte", [4, 5, 6])  # FLG, BD, HC
def test_lz4_in_c_every_descriptor_byte_as_python(monkeypatch: pytest.MonkeyPatch, byte: int) -> None:
    # Any descriptor (reserved bits, block size values 0-3 and 8-15, checksum and content size
    # flags, dependent blocks, a wrong HC) decodes or fails in C as _compression says
    data = _batches([b"lz4"] * 3)
    at = _batch_at(data, 0)[0] + 61 + byte
    for value in range(256):
        damaged = bytearray(data)
        damaged[at] = value
        (t0, e0), (t1, e1), (t2, e2), _ = _decoded_three_ways(monkeypatch, bytes(damaged), verify_crc=False)
        if e0 is None:
            assert e1 is None and e2 is None
            _same_table(t0, t1)
            _same_table(t0, t2)
        else:
            for e in (e1, e2):
                assert e is not None and (str(e), e.batch_index) == (str(e0), e0.batch_index)


@pytest.mark.parametrize("k", range(40, 48))  # every place in a 16 KiB chunk: front, back, between
def test_lz4_in_c_corrupt_block_gives_the_python_error(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    data = bytearray(_batches([b"lz4"] * 120))
    pos, _ = _batch_at(data, k)
    data[pos + 61 + 11] ^= 0xFF  # the first block's first token
    _fail_alike(_decoded_three_ways(monkeypatch, bytes(data), verify_crc=False)[:3], k)


def test_decodes_from_several_threads_share_the_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    # One helper thread per process serves every caller: callers that find it busy do their
    # chunks alone (their queued job is cancelled), and nobody waits on anybody else's chunk.
    import concurrent.futures

    data = _batches([b"sized", b"xerial", b"gzip", b"lz4"] * 45)
    want = _outcome(monkeypatch, 1, data)[0]
    with monkeypatch.context() as m:
        m.setattr(core, "_CPUS", 2)
        m.setattr(core, "_CHUNK_BYTES", 16384)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            tables = list(pool.map(lambda _: kbatch.decode(data), range(16)))
    for t in tables:
        _same_table(want, t)
