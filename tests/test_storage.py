"""Range reads of a segment through a filesystem (pyarrow's local one standing in for a remote
store): each byte fetched once, in requests of the window's size, records as the mmap read."""

from __future__ import annotations

import pytest

import kbatch
from kbatch import _storage
from kbatch.log import LogDir, LogWriter, open_log

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
