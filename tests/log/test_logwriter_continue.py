"""``LogWriter`` on an existing partition continues it, or refuses; it never truncates (issue 35.3)."""

from __future__ import annotations

import numpy as np
import pytest

import kbatch
from kbatch.errors import LayoutError
from kbatch.log import LogWriter, open_log
from kbatch.log._segment import OFFSET_INDEX_DTYPE, scan_headers


def _batch(i: int, n: int = 1) -> bytes:
    return kbatch.encode([b"v%d" % j for j in range(i, i + n)], base_offset=i,
                         timestamps=[1_700_000_000_000 + j for j in range(i, i + n)])


def _fifteen(root, **kw):
    with LogWriter(root, "t", 0, index_interval_bytes=100, **kw) as w:
        for i in range(15):
            w.append(_batch(i))
    return w


def test_reopened_partition_is_continued(tmp_path):
    first = _fifteen(tmp_path)
    with LogWriter(tmp_path, "t", 0, index_interval_bytes=100) as w:
        assert w.next_offset == 15
        assert w.topic_id == first.topic_id
        w.append(_batch(15, 2))
        for i in range(17, 25):
            w.append(_batch(i))
    t = open_log(tmp_path / "t-0").read()
    assert t.records["offset"].tolist() == list(range(25))
    assert [bytes(v) for v in t.values()] == [b"v%d" % i for i in range(25)]
    assert (tmp_path / "t-0" / "partition.metadata").read_text().split()[-1] == first.topic_id
    # the index was extended: every entry points at a batch start holding its offset
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    data = seg.read_bytes()
    heads = scan_headers(memoryview(data), 0, len(data), 1 << 62, seg)[0]
    starts = {int(p): int(b) + int(d) for p, b, d in zip(heads["position"], heads["base_offset"],
                                                          heads["last_offset_delta"], strict=True)}
    index = np.fromfile(seg.with_suffix(".index"), dtype=OFFSET_INDEX_DTYPE)
    assert len(index) > 3 and int(index["relative_offset"][-1]) >= 17
    for rel, pos in index.tolist():
        assert starts[pos] == rel


def test_continued_partition_rolls_when_due(tmp_path):
    _fifteen(tmp_path, segment_bytes=400)
    with LogWriter(tmp_path, "t", 0, segment_bytes=400) as w:
        for i in range(15, 30):
            w.append(_batch(i))
    assert open_log(tmp_path / "t-0").read().records["offset"].tolist() == list(range(30))
    sizes = [p.stat().st_size for p in sorted((tmp_path / "t-0").glob("*.log"))]
    assert len(sizes) >= 5 and max(sizes) <= 400


def test_damaged_partition_is_refused_untouched(tmp_path):
    _fifteen(tmp_path)
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    seg.write_bytes(seg.read_bytes()[:-7])  # cut inside the last batch
    before = {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir()}
    with pytest.raises(LayoutError, match="damaged"):
        LogWriter(tmp_path, "t", 0)
    assert {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir()} == before


def test_other_topic_id_is_refused(tmp_path):
    _fifteen(tmp_path)
    with pytest.raises(LayoutError, match="topic id"):
        LogWriter(tmp_path, "t", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    assert open_log(tmp_path / "t-0").read().records["offset"].tolist() == list(range(15))


def test_not_a_segment_is_refused(tmp_path):
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "notes.log").write_text("x")
    with pytest.raises(LayoutError, match="not a segment"):
        LogWriter(tmp_path, "t", 0)
