"""Range reads of a segment through a filesystem (pyarrow's local one standing in for a remote
store): each byte fetched once, in requests of the window's size, records as the mmap read."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogDir, LogWriter, open_log
from kbatch.storage import _location as _storage

pafs = pytest.importorskip("pyarrow.fs")


@pytest.fixture
def root(tmp_path):
    with LogWriter(tmp_path, "t", 0) as w:
        for i in range(300):
            values = [b"%d-%d" % (i, k) * (1 + (i + k) % 7) for k in range(8)]
            w.append(kbatch.encode(values, base_offset=8 * i, compression="gzip" if i % 5 == 0 else None))
    return tmp_path / "t-0"


@pytest.mark.parametrize("chunk_bytes", [1_000, 7_000, 1 << 30])
def test_each_byte_fetched_once(root, chunk_bytes):
    local = LogDir(root)
    remote = open_log(str(root), filesystem=pafs.LocalFileSystem())
    (seg,) = remote.segments
    assert seg.is_remote
    seg._reader.chunk = 4_096
    got = [t.records["offset"].tolist() for t in remote.iter_tables(chunk_bytes=chunk_bytes)]
    want = [t.records["offset"].tolist() for t in local.iter_tables(chunk_bytes=chunk_bytes)]
    assert got == want
    assert remote.read().values() == local.read().values()
    log = open_log(str(root), filesystem=pafs.LocalFileSystem())
    log.segments[0]._reader.chunk = 4_096
    n = sum(len(t) for t in log.iter_tables(chunk_bytes=chunk_bytes))
    r = log.segments[0]._reader
    assert n == len(local.read())
    assert r.bytes_read == log.segments[0].size  # nothing fetched twice
    assert r.requests <= log.segments[0].size // 4_096 + 2  # one request per window, none per batch


def test_locate():
    assert _storage.locate("file:///x/y").fs is None
    with pytest.raises(ValueError, match="storage_options apply to a remote URL"):
        _storage.locate("/x", storage_options={"region": "x"})
    with pytest.raises(TypeError, match="filesystem must be"):
        _storage.locate("x", filesystem=object())
    assert not _storage.is_remote("/data/t-0") and _storage.is_remote("s3://b/k")


@pytest.fixture
def three_segments(tmp_path):
    with LogWriter(tmp_path, "t", 0, segment_bytes=6_000) as w:
        for i in range(60):
            w.append(kbatch.encode([b"%d-%d" % (i, k) * 9 for k in range(8)], base_offset=8 * i))
    d = tmp_path / "t-0"
    assert len(list(d.glob("*.log"))) >= 3
    return d


def _io_threads():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("kbatch-io")]


def test_read_ahead_overlaps_segments_and_each_byte_is_fetched_once(three_segments):
    log = open_log(str(three_segments), filesystem=pafs.LocalFileSystem())
    tables = log.iter_tables()
    first = next(tables)
    assert first.records["offset"][0] == 0
    # reading segment 0 (one window) has already requested segment 1's first chunk
    assert log.segments[1]._reader._pending
    rest = list(tables)
    assert sum(len(t) for t in [first, *rest]) == len(LogDir(three_segments).read())
    for seg in log.segments:
        assert seg._reader.bytes_read == seg.size and seg._reader.requests == 1
    log.close()
    assert len(_io_threads()) <= _storage.IO_THREADS


def test_read_ahead_error_is_raised_where_the_bytes_are_needed(three_segments):
    """A background fetch that fails (segment 1 cut since the listing) surfaces as that
    StorageError, naming the object, when the read reaches it: after every record of
    segment 0, no hang, and closing waits for nothing left running."""
    log = open_log(str(three_segments), filesystem=pafs.LocalFileSystem())
    cut = log.segments[1]
    with open(cut.path, "r+b") as f:
        f.truncate(cut.size // 2)
    got = []

    def read_all():
        for t in log.iter_tables():
            got.extend(t.records["offset"].tolist())

    with pytest.raises(kbatch.StorageError, match="short read") as e:
        read_all()
    assert e.value.url == str(cut.path)
    want = LogDir(three_segments).segments[0].base_offset, log.segments[1].base_offset
    assert got == list(range(*want))
    log.close()
    assert not any(s._reader._pending for s in log.segments)
    assert len(_io_threads()) <= _storage.IO_THREADS


def test_read_ahead_never_needed_is_dropped_silently(three_segments):
    log = open_log(str(three_segments), filesystem=pafs.LocalFileSystem())
    for seg in log.segments[1:]:
        with open(seg.path, "r+b") as f:
            f.truncate(1)
    assert len(log.read(max_records=5)) == 5  # segment 1's failed read-ahead is not what was read
    log.close()


def test_read_ahead_within_one_object(root):
    log = open_log(str(root), filesystem=pafs.LocalFileSystem())
    r = log.segments[0]._reader
    r.chunk = 4_096
    size = log.segments[0].size
    with open(log.segments[0].path, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(kbatch.StorageError, match="short read") as e:
        log.read()
    assert e.value.position == size - 100
    log.close()
