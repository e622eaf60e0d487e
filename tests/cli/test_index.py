"""``kbatch index ROOT``: every segment's time index built ahead of time; a scan then reads only the
batches its window needs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from kbatch.cli import _main as cli
from kbatch.cli._sample import write_sample
from kbatch.log import ScanStats, open_log, open_logs

SUMMARY = re.compile(r"kbatch index: (\d+) segments? indexed(?: \((\d+) segments? up to date\))?, "
                     r"([\d,]+) batch(?:es)?, [\d.]+ (?:B|KiB|MiB|GiB) in [\d.]+ s into (.+)")


def test_index_a_root_then_scan_with_it(tmp_path: Path, capsys) -> None:
    logs = write_sample(tmp_path / "root")
    index_dir = tmp_path / "index"
    assert cli.main(["index", str(tmp_path / "root"), "--index-dir", str(index_dir)]) == 0
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    m = SUMMARY.fullmatch(line)
    assert m, line
    segments = sum(len(log.segments) for log in open_logs(tmp_path / "root"))
    assert int(m.group(1)) == segments and m.group(2) is None and m.group(4) == str(index_dir)
    assert len(list(index_dir.glob("*.tix"))) == segments
    # again: nothing to do
    assert cli.main(["index", str(tmp_path / "root"), "--index-dir", str(index_dir)]) == 0
    m = SUMMARY.fullmatch(capsys.readouterr().err.strip())
    assert m and m.group(1) == "0" and int(m.group(2)) == segments
    # a scan of a narrow window uses it: the batches outside are never framed
    log = open_log(logs["orders-0"])
    t = log.read()
    stamps = np.sort(t.records["timestamp"])
    lo, hi = int(stamps[len(stamps) // 2]), int(stamps[len(stamps) // 2 + 10])
    want = [o for o, ts in zip(t.records["offset"].tolist(), t.records["timestamp"].tolist(), strict=True)
            if lo <= ts < hi]
    stats = ScanStats()
    got = log.scan_records(["offset"], [("timestamp", ">=", lo), ("timestamp", "<", hi)], stats=stats,
                           index_dir=index_dir).read_all().column("offset").to_pylist()
    assert got == want and len(got) >= 10
    assert stats.indexes_used == len(log.segments)
    assert stats.batches_skipped_by_index > 0 and stats.indexes_written == 0
    assert stats.batches_framed + stats.batches_skipped_by_index == len(log.scan())


def test_index_a_partition_directory_with_progress(tmp_path: Path, capsys) -> None:
    logs = write_sample(tmp_path / "root")
    assert cli.main(["index", str(logs["payments-0"]), "--index-dir", str(tmp_path / "ix"), "--progress",
                     "always"]) == 0
    err = capsys.readouterr().err
    assert "\r" in err and SUMMARY.fullmatch(err.rsplit("\x1b[K", 1)[-1].strip())
    assert len(list((tmp_path / "ix").glob("*.tix"))) == len(open_log(logs["payments-0"]).segments)


def test_index_user_mistakes_are_one_line(tmp_path: Path, capsys) -> None:
    write_sample(tmp_path / "root")
    (tmp_path / "file").write_text("x")
    for argv in (["index", str(tmp_path / "nope")],
                 ["index", str(tmp_path / "root"), "--index-dir", str(tmp_path / "file" / "below")],
                 ["index", str(tmp_path / "file")],
                 ["index", str(tmp_path), "--index-dir", str(tmp_path / "ix")],  # partitions are deeper
                 ["index", str(tmp_path / "root"), "--storage-option", "nokey"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("kbatch index: error: ") and err.count("\n") == 1, err
