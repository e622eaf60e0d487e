"""Aiven's tiered-storage layout: a segment's indexes packed in one ``.indexes`` object, cut by
the ranges its ``.rsm-manifest`` names; hints, checked as any index; without them nothing is lost."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

import kbatch
from kbatch.log import LogDir, LogWriter, open_log, open_logs

TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"


@pytest.fixture
def broker(tmp_path):
    with LogWriter(tmp_path / "broker", "orders", 0, segment_bytes=3000, index_interval_bytes=200) as w:
        for i in range(40):
            w.append(kbatch.encode([b"v%d-%d" % (i, k) * 4 for k in range(5)], base_offset=5 * i,
                                   timestamps=[1000 + 5 * i + k for k in range(5)]))
    return tmp_path / "broker" / "orders-0"


def _upload(src, dest, *, indexes=True, manifest_ranges=None):
    """``src``'s segments as Aiven's plugin stores them: .log, .indexes, .rsm-manifest."""
    part = dest / f"orders-{TOPIC_ID}" / "0"
    part.mkdir(parents=True)
    for log in sorted(src.glob("*.log")):
        stem = f"{log.stem}-{base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip('=')}"
        (part / f"{stem}.log").write_bytes(log.read_bytes())
        blobs = [("offset", log.with_suffix(".index").read_bytes()),
                 ("timestamp", log.with_suffix(".timeindex").read_bytes()),
                 ("producerSnapshot", b"\x00" * 10), ("leaderEpoch", b"0\n1\n0 0\n")]
        ranges, pos = {}, 0
        for key, blob in blobs:
            ranges[key] = {"position": pos, "size": len(blob)}
            pos += len(blob)
        ranges["transaction"] = None
        if indexes:
            (part / f"{stem}.indexes").write_bytes(b"".join(b for _, b in blobs))
        manifest = {"version": "1", "chunkIndex": {}, "compression": False,
                    "segmentIndexes": manifest_ranges or ranges}
        (part / f"{stem}.rsm-manifest").write_text(json.dumps(manifest))
    return part


@pytest.mark.parametrize("remote", [False, True])
def test_offset_and_time_indexes_come_from_the_indexes_object(broker, tmp_path, remote):
    part = _upload(broker, tmp_path / "tiered")
    local = LogDir(broker)
    if remote:
        pafs = pytest.importorskip("pyarrow.fs")
        (log,) = open_logs(str(tmp_path / "tiered"), recursive=True, filesystem=pafs.LocalFileSystem())
        assert log.segments[0].is_remote
    else:
        log = open_log(part)
    assert len(log.segments) == len(local.segments) > 2
    for seg, want in zip(log.segments, local.segments, strict=True):
        assert seg.index is not None and len(seg.index) > 1
        assert seg.index.tolist() == want.index.tolist()
        assert seg.timeindex.tolist() == want.timeindex.tolist()
    assert log.read(start_offset=123).records["offset"].tolist() == local.read(start_offset=123).records[
        "offset"].tolist()
    assert log.offset_for_timestamp(1123) == local.offset_for_timestamp(1123) == 123


def test_without_indexes_nothing_is_lost(broker, tmp_path):
    part = _upload(broker, tmp_path / "tiered", indexes=False)
    log, local = open_log(part), LogDir(broker)
    assert all(s.index is None and s.timeindex is None for s in log.segments)
    assert log.read().values() == local.read().values()
    assert log.read(start_offset=77).records["offset"].tolist()[0] == 77


def test_a_range_outside_the_object_is_noted_and_not_used(broker, tmp_path):
    part = _upload(broker, tmp_path / "tiered", manifest_ranges={"offset": {"position": 0, "size": 1 << 30}})
    log, local = open_log(part), LogDir(broker)
    assert all(s.index is None for s in log.segments)
    assert any("outside the object" in n for n in log.notes)
    assert log.read().values() == local.read().values()


def test_lying_entries_are_checked_as_any_index(broker, tmp_path):
    part = _upload(broker, tmp_path / "tiered")
    for f in part.glob("*.indexes"):
        raw = bytearray(f.read_bytes())
        raw[12:16] = (7).to_bytes(4, "big")  # the second offset entry points into the middle of a batch
        f.write_bytes(bytes(raw))
    log, local = open_log(part), LogDir(broker)
    for start in (0, 20, 61, 150):
        assert log.read(start_offset=start).values() == local.read(start_offset=start).values()
