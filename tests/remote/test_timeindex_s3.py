"""The scans' time index over S3 (moto's server): the same index as a local root's, and the batches it
rules out are never downloaded (counted by the segments' range readers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.s3 import fresh_prefix

import kbatch
from kbatch.cli import _main as cli
from kbatch.log import LogWriter, ScanStats, open_log

pytest.importorskip("pyarrow")


def _log(root: Path) -> Path:
    """200 batches of 20 records 10 s apart, jittered by up to 3 s (out of order), in segments of ~20 KB."""
    rng = np.random.default_rng(5)
    with LogWriter(root, "d", 0, segment_bytes=20_000) as w:
        for b in range(200):
            stamps = (10_000 * b + rng.integers(-3000, 3001, 20)).clip(0).tolist()
            w.append(kbatch.encode([b"v%d" % b * 20] * 20, base_offset=20 * b, timestamps=stamps, compression="zstd"))
    return root / "d-0"


@pytest.fixture(scope="module")
def remote_log(tmp_path_factory, s3_client) -> tuple[str, Path]:
    local = _log(tmp_path_factory.mktemp("tix"))
    url = fresh_prefix(s3_client, "kbatch")
    bucket, prefix = url[len("s3://"):].split("/", 1)
    for f in sorted(local.iterdir()):
        s3_client.upload_file(str(f), bucket, f"{prefix}/d-0/{f.name}")
    return f"{url}/d-0", local


TERMS = [("timestamp", ">=", 1_000_000), ("timestamp", "<", 1_030_000)]


def _scan(url: str, options: dict, index_dir: Path, **kw) -> tuple[list[int], ScanStats, int, int]:
    """(offsets, stats, bytes and range requests of the segments' readers) of a scan of a freshly opened log."""
    log = open_log(url, storage_options=options)
    stats = ScanStats()
    got = log.scan_records(["offset", "value"], TERMS, stats=stats, index_dir=index_dir, **kw).read_all()
    read = sum(seg._reader.bytes_read for seg in log.segments)
    requests = sum(seg._reader.requests for seg in log.segments)
    return got.column("offset").to_pylist(), stats, read, requests


def _want(local: Path) -> list[int]:
    t = open_log(local).read()
    return [o for o, ts in zip(t.records["offset"].tolist(), t.records["timestamp"].tolist(), strict=True)
            if 1_000_000 <= ts < 1_030_000]


def test_the_index_spares_remote_reads(remote_log, s3_options, tmp_path: Path) -> None:
    url, local = remote_log
    want = _want(local)
    plain, plain_stats, plain_bytes, _ = _scan(url, s3_options, tmp_path / "ix", index=False)
    assert plain == want and plain_stats.indexes_written == 0
    first, first_stats, first_bytes, _ = _scan(url, s3_options, tmp_path / "ix")
    assert first == want and first_stats.indexes_written > 0
    second, stats, read, _ = _scan(url, s3_options, tmp_path / "ix")
    assert second == want
    assert stats.indexes_used > 0 and stats.batches_skipped_by_index > 150
    # the window's batches only (a few KiB, and the 61-byte first headers the identities read)
    size = sum(f.stat().st_size for f in local.glob("*.log"))
    assert read < size / 10 < plain_bytes, (read, size, plain_bytes)
    assert read < first_bytes / 5


def test_kbatch_index_on_s3_then_a_scan(remote_log, s3_options, tmp_path: Path, capsys) -> None:
    url, local = remote_log
    index_dir = tmp_path / "built"
    argv = ["index", url.rsplit("/", 1)[0], "--index-dir", str(index_dir)]
    for k, v in s3_options.items():
        argv += ["--storage-option", f"{k}={v}"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    n = len(list(local.glob("*.log")))
    assert err.startswith(f"kbatch index: {n} segments indexed, 200 batches"), err
    got, stats, read, _ = _scan(url, s3_options, index_dir)
    assert got == _want(local)
    assert stats.indexes_used == n and stats.indexes_written == 0
    assert read < sum(f.stat().st_size for f in local.glob("*.log")) / 10
