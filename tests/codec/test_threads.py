"""The second core: decode's parse thread, parallel compression, and what stays safe.

Every test runs the same input once with ``_CPUS = 1`` (everything on the calling
thread) and once with two cores usable, and asks for identical results: tables
column by column, errors field by field (their ``partial`` tables included), and
encoded bytes byte for byte. The inputs are large enough for the threaded paths to be
taken (compressed decodes, compressed encodes over 1 MiB, uncompressed encodes over 4 MiB),
or the thresholds are lowered so that they are (uncompressed decodes, split by batches).
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.twocores import (
    CODECS,
    PLAN_RECORDS,
    N,
    Records,
    batch_starts,
    compressed_batches,
    encode_records,
    make_records,
    outcome,
    same_outcome,
    same_table,
    with_cpus,
)

import kbatch
from kbatch.codec import _core as core


@pytest.fixture(scope="module")
def records() -> Records:
    return make_records()


@pytest.fixture(scope="module")
def encoded(records: Records) -> dict[str, bytes]:
    return encode_records(records)


@pytest.mark.parametrize("codec", CODECS)
def test_threaded_decode_equals_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], records, codec: str
) -> None:
    data = encoded[codec]
    assert same_outcome(monkeypatch, data) is None
    t = kbatch.decode(data)
    assert t.values() == records[0]
    assert len(t.batches) == N // 500


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("which", [0, 1, 5, -1])
@pytest.mark.parametrize("verify_crc", [True, False])
def test_threaded_decode_errors_equal_inline(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], codec: str, which: int, verify_crc: bool
) -> None:
    data = bytearray(encoded[codec])
    starts = batch_starts(bytes(data))
    k = which % len(starts)
    # A byte in the middle of batch k's records: a CRC mismatch with verify_crc, else
    # (mostly) a parse or decompression error in that batch.
    end = starts[k + 1] if k + 1 < len(starts) else len(data)
    data[(starts[k] + 61 + end) // 2] ^= 0x5A
    err = same_outcome(monkeypatch, bytes(data), verify_crc=verify_crc)
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
    starts = batch_starts(bytes(data))
    count_at = starts[1] + 57
    struct.pack_into(">i", data, count_at, struct.unpack_from(">i", data, count_at)[0] - 1)  # one record too many
    end = starts[2]
    struct.pack_into(">I", data, starts[1] + 17, core._crc32c(bytes(data[starts[1] + 21 : end])))
    data[starts[11] + 30] ^= 1  # in batch 11's header, under its CRC
    err = same_outcome(monkeypatch, bytes(data))
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
    starts = batch_starts(bytes(data))
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
    err = same_outcome(monkeypatch, bytes(data), verify_crc=verify_crc)
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
        same_outcome(m, bytes(data), verify_crc=verify_crc)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_parallel_compression_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch, codec: str) -> None:
    values, keys, timestamps, headers = make_records(2 * N)  # > 1 MiB uncompressed: two threads
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500, "compression": codec}
    one = with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
    assert one == two
    assert kbatch.decode(two).values() == values


def test_parallel_compression_raises_codec_errors(monkeypatch: pytest.MonkeyPatch, records) -> None:  # type: ignore[no-untyped-def]
    values = records[0]
    with pytest.raises(ValueError, match="level"):
        with_cpus(
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
    assert same_outcome(monkeypatch, data, decode=core.decode, skip_batches=skip, keep_skipped_rows=keep) is None
    kept = [v for i, v in enumerate(records[0]) if not skip[i // 500]]
    assert core.decode(data, skip_batches=skip, keep_skipped_rows=keep).values() == kept


@pytest.mark.parametrize("plain", [True, False])
def test_parallel_write_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch, plain: bool) -> None:
    # > 4 MiB uncompressed: the second half of the batches is written on the worker,
    # from plain lists (GIL held throughout) or from snapshots (a bytearray inside).
    values, keys, timestamps, headers = make_records(6 * N)
    if not plain:
        values[-1] = bytearray(values[-1])
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500}
    one = with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
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


def test_the_worker_thread_starts_and_runs_jobs_here() -> None:
    # (else every "threaded" case above would quietly have run inline)
    assert core.Helper(True).threaded
    assert not core.Helper(False).threaded


def test_compressed_encode_writes_its_raw_halves_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # > 4 MiB uncompressed: the raw block is written in two halves (C worker), then
    # compressed in two halves (Python thread): same bytes as one thread.
    values, keys, timestamps, headers = make_records(6 * N)
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500, "compression": "lz4"}
    one = with_cpus(monkeypatch, 1, kbatch.encode, values, keys, **kwargs)
    two = with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs)
    assert one == two
    assert kbatch.decode(two).values() == values


# Planning (which records go in which batch) runs on two threads from 32,768 records
# (PARALLEL_RECORDS_MIN) when record counts set the boundaries: the back half is planned
# as if a batch began at a multiple of max_batch_records, and planned again from the
# front's last batch when that batch could have gone on (a byte limit binding).


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
    one = with_cpus(monkeypatch, 1, kbatch.encode, values, **kwargs)
    two = with_cpus(monkeypatch, 2, kbatch.encode, values, **kwargs)
    assert one == two
    t = kbatch.decode(two)
    assert t.values() == values
    counts = t.batches["record_count"]
    assert counts.max() <= max_records
    if max_bytes is not None:
        assert (t.batches["batch_length"] + 12 <= max_bytes).all()
    assert (counts[:-1] == max_records).all() or max_bytes is not None


def test_decodes_from_several_threads_share_the_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each caller takes an idle helper thread of the process (or starts one) and gives it back:
    # nobody waits on anybody else's chunk, and concurrent callers get the same tables.
    import concurrent.futures

    data = compressed_batches([b"sized", b"xerial", b"gzip", b"lz4"] * 45)
    want = outcome(monkeypatch, 1, data)[0]
    with monkeypatch.context() as m:
        m.setattr(core, "_CPUS", 2)
        m.setattr(core, "_CHUNK_BYTES", 16384)
        m.setattr(core, "_CHUNK_BYTES_MAX", 16384)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            tables = list(pool.map(lambda _: kbatch.decode(data), range(16)))
    for t in tables:
        same_table(want, t)


def _threaded_work(monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes]) -> None:
    """One of each use of the helper thread, with two cores: the split parse, the chunked
    parse with decompression in pieces (a Python job) and LZ4 in C, planning and writing,
    parallel compression (a Python job) and to_arrow's chunks."""
    values, keys, timestamps, headers = make_records(2 * N)
    for codec in ("none", "gzip", "lz4", "zstd"):
        same_table(outcome(monkeypatch, 1, encoded[codec])[0], outcome(monkeypatch, 2, encoded[codec])[0])
    kwargs = {"timestamps": timestamps, "headers": headers, "max_batch_records": 500, "compression": "gzip"}
    assert with_cpus(monkeypatch, 2, kbatch.encode, values, keys, **kwargs) == with_cpus(
        monkeypatch, 1, kbatch.encode, values, keys, **kwargs
    )
    plan = {"timestamps": [0] * PLAN_RECORDS, "max_batch_records": 500}
    assert with_cpus(monkeypatch, 2, kbatch.encode, [b"v"] * PLAN_RECORDS, **plan) == with_cpus(
        monkeypatch, 1, kbatch.encode, [b"v"] * PLAN_RECORDS, **plan
    )
    pytest.importorskip("pyarrow")
    from kbatch import arrow
    from kbatch.codec import _arrow_columns

    table = kbatch.decode(encoded["none"])
    with monkeypatch.context() as m:
        m.setattr(_arrow_columns, "_THREAD_CHUNK", 512)
        assert with_cpus(monkeypatch, 2, arrow.to_arrow, table).equals(with_cpus(monkeypatch, 1, arrow.to_arrow, table))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc/self/task")
def test_helper_threads_do_not_pile_up(monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes]) -> None:
    # Every call hands its helpers back: those kept between calls (at most HELPERS_KEPT, 4) are
    # reused, the others are let go; however many calls there are, the threads stay as many.
    import time

    _threaded_work(monkeypatch, encoded)
    before = len(os.listdir("/proc/self/task"))
    for _ in range(10):
        _threaded_work(monkeypatch, encoded)
    for _ in range(100):  # (threads let go exit on their own, soon after)
        if len(os.listdir("/proc/self/task")) <= before + 4:
            break
        time.sleep(0.05)
    assert len(os.listdir("/proc/self/task")) <= before + 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_helper_threads_of_its_own(
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes]
) -> None:
    # The parent's idle helpers are not in the child (fork copies only the calling thread):
    # handing one of them a job would wait forever. The child starts its own.
    import signal
    import time

    _threaded_work(monkeypatch, encoded)  # the parent keeps idle helpers
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if everything ran and agreed
        code = 1
        try:
            _threaded_work(monkeypatch, encoded)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120  # (a hang guard, not a speed limit)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung: it handed a job to a thread it does not have")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
