"""``kbatch dump``: the lines of Kafka's DumpLogSegments, --json, and one-line errors."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL_LOGS
from support.dumprun import dump

import kbatch
from kbatch.codec._legacy import encode_legacy
from kbatch.log import LogWriter


@pytest.fixture
def part(tmp_path: Path) -> Path:
    with LogWriter(tmp_path, "d", 0, index_interval_bytes=50) as w:
        w.append(kbatch.encode([b"hello", None], keys=[b"k", None], timestamps=[10, 11],
                               headers=[[("a", b"1"), ("b", None)], []], producer_id=5, producer_epoch=1,
                               base_sequence=7, transactional=True))
        w.append(kbatch.encode_control("commit", 5, 1, base_offset=2, coordinator_epoch=4, timestamp=12))
        w.append(kbatch.encode([b"z"], timestamps=[13], base_offset=3, compression="gzip"))
    return w.path / "00000000000000000000"


BATCH0 = ("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 7 lastSequence: 8 producerId: 5 producerEpoch: 1 "
          "partitionLeaderEpoch: -1 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty "
          "position: 0 CreateTime: 11 size: 88 magic: 2 compresscodec: none crc: {crc} isvalid: true")


def test_log_lines_as_kafka_prints_them(part: Path) -> None:
    log = part.with_suffix(".log")
    raw = log.read_bytes()
    crc0 = struct.unpack_from(">I", raw, 17)[0]
    rc, out, err = dump("--files", str(log), "--print-data-log")
    assert rc == 0 and err == []
    assert out == [
        f"Dumping {log}",
        "Log starting offset: 0",
        BATCH0.format(crc=crc0),
        "| offset: 0 CreateTime: 10 keySize: 1 valueSize: 5 sequence: 7 headerKeys: [a,b] key: k payload: hello",
        "| offset: 1 CreateTime: 11 keySize: -1 valueSize: -1 sequence: 8 headerKeys: []",
        out[5],
        ("| offset: 2 CreateTime: 12 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
         "endTxnMarker: COMMIT coordinatorEpoch: 4"),
        out[7],
        "| offset: 3 CreateTime: 13 keySize: -1 valueSize: 1 sequence: -1 headerKeys: [] payload: z",
    ]
    assert out[5].startswith("baseOffset: 2 lastOffset: 2 count: 1 ") and "isControl: true" in out[5]
    assert "position: 88 CreateTime: 12 size: 78 magic: 2 compresscodec: none" in out[5]
    assert "compresscodec: gzip" in out[7] and out[7].endswith("isvalid: true")
    # without --deep-iteration: batch lines only
    rc, shallow, _ = dump("--files", str(log))
    assert shallow == [out[0], out[1], out[2], out[5], out[7]]
    rc, deep, _ = dump("--files", str(log), "--deep-iteration")
    assert deep[3] == "| offset: 0 CreateTime: 10 keySize: 1 valueSize: 5 sequence: 7 headerKeys: [a,b]"


def test_invalid_crc_and_trailing_bytes(part: Path) -> None:
    log = part.with_suffix(".log")
    raw = bytearray(log.read_bytes())
    raw[70] ^= 1
    log.write_bytes(bytes(raw) + b"\x00" * 10)
    rc, out, _ = dump("--files", str(log))
    assert rc == 0
    assert out[2].endswith("isvalid: false") and out[3].endswith("isvalid: true")
    assert out[-1] == "Found 10 invalid bytes at the end of 00000000000000000000.log"
    # a frame that cannot be a batch (Kafka's tool throws): one error line, rc 1, the rest still reported
    log.write_bytes(bytes(raw) + b"\x00" * 20)
    rc, out, err = dump("--files", str(log))
    assert rc == 1 and err == [f"kbatch dump: {log}: batchLength 0 is below the minimum 14 at byte {len(raw) + 8}"]
    assert out[-1] == "Found 20 invalid bytes at the end of 00000000000000000000.log"
    rc, out, _ = dump("--files", str(log), "--max-bytes", "100")
    assert len(out) == 3 and not out[-1].startswith("Found")


def test_index_files(part: Path) -> None:
    index, timeindex = part.with_suffix(".index"), part.with_suffix(".timeindex")
    rc, out, err = dump("--files", f"{index},{timeindex}")
    assert rc == 0 and err == []
    assert out == [f"Dumping {index}", "offset: 2 position: 88", "offset: 3 position: 166",
                   f"Dumping {timeindex}", "timestamp: 12 offset: 2", "timestamp: 13 offset: 3"]
    rc, out, err = dump("--files", str(index), "--verify-index-only")
    assert out == [f"Dumping {index}"] and err == []
    index.write_bytes(struct.pack(">ii", 1, 88))
    rc, out, err = dump("--files", str(index), "--verify-index-only")
    assert err == [f"Mismatches in :{index}", "  Index offset: 1, log offset: 2"]
    rc, out, _ = dump("--files", str(index), "--index-sanity-check")
    assert out[-1] == f"{index} passed sanity check."
    index.write_bytes(struct.pack(">ii", 3, 88) + struct.pack(">ii", 1, 166) + b"\x01")
    rc, _, err = dump("--files", str(index), "--index-sanity-check")
    assert rc == 1 and len(err) == 1


def test_txnindex_and_legacy(tmp_path: Path) -> None:
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(encode_legacy([b"old"], [b"k"], timestamps=[7], magic=1))
        w.append(kbatch.encode([b"x"], base_offset=1, producer_id=8, producer_epoch=0, transactional=True))
        w.append(kbatch.encode_control("abort", 8, 0, base_offset=2))
    seg = w.path / "00000000000000000000"
    rc, out, _ = dump("--files", f"{seg}.log,{seg}.txnindex", "--deep-iteration")
    assert rc == 0
    assert out[2].startswith("offset: 0 position: 0 CreateTime: 7 size: ") and " magic: 1 " in out[2]
    assert out[3].startswith("| offset: 0 CreateTime: 7 keySize: 1 valueSize: 3 isValid: true crc: ")
    assert out[-1] == "version: 0 producerId: 8 firstOffset: 1 lastOffset: 2 lastStableOffset: 3"


def test_json_lines(part: Path) -> None:
    rc, out, _ = dump("--files", str(part.with_suffix(".log")), "--print-data-log", "--json")
    assert rc == 0
    rows = [json.loads(line) for line in out]
    assert [r["type"] for r in rows] == ["file", "segment", "batch", "record", "record", "batch", "control",
                                         "batch", "record"]
    assert rows[3]["payload"] == "hello" and rows[3]["header_keys"] == ["a", "b"]
    assert rows[6]["control_type"] == "COMMIT" and rows[6]["coordinator_epoch"] == 4


def test_not_a_kafka_log_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "00000000000000000000.log"
    junk.write_bytes(b"this is a text file, not a Kafka log at all")
    named = tmp_path / "notes.log"
    named.write_bytes(b"x")
    rc, out, err = dump("--files", f"{junk},{named},{tmp_path / 'missing.index'},{tmp_path / 'a.txt'}")
    assert rc == 1 and out[0] == f"Dumping {junk}"
    assert len(err) == 4 and all("\n" not in e for e in err)
    assert "not a Kafka log" in err[0] and "not named like a segment" in err[1] and "no such file" in err[2]
    assert err[3].startswith("Ignoring unknown file")


def test_command_line_end_to_end(part: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, kbatch.cli._dump as d; sys.exit(d.main(sys.argv[1:]))",
         "--files", str(part.with_suffix(".log")), "--print-data-log"],
        capture_output=True, text=True, cwd=repo, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[3].endswith("key: k payload: hello")


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"no real broker logs at {REAL_LOGS}")
def test_real_logs_dump_cleanly() -> None:
    files = sorted(str(p) for p in REAL_LOGS.glob("*/*/*.log"))
    rc, out, err = dump("--files", ",".join(files), "--deep-iteration")
    assert rc == 0 and err == []
    assert sum(line.startswith("Dumping") for line in out) == len(files)
    assert not any(line.startswith("Found") for line in out)
    assert all(line.endswith("isvalid: true") for line in out if line.startswith("baseOffset"))


def test_many_partition_folders_say_what_was_not_dumped_once(tmp_path: Path) -> None:
    """50 ``__consumer_offsets`` folders: one stderr line, not 50; --json keeps one per folder."""
    parts = []
    for p in range(50):
        with LogWriter(tmp_path, "__consumer_offsets", p) as w:
            w.append(kbatch.encode([b"v"]))
        (w.path / "leader-epoch-checkpoint").write_text("0\n0\n")
        parts.append(w.path)
    (parts[7] / "notes.txt").write_text("x")
    rc, out, err = dump("--files", ",".join(map(str, parts)))
    assert rc == 0 and sum(line.startswith("Dumping") and line.endswith(".log") for line in out) == 50
    assert err == [(f"kbatch dump: 50 directories ({parts[0]}, {parts[1]}, {parts[2]} and 47 more): not dumped "
                   "(not a segment, index or snapshot file): leader-epoch-checkpoint, notes.txt (in 1), "
                   "partition.metadata")]
    rc, out, err = dump("--files", ",".join(map(str, parts)), "--json")
    lines = [json.loads(line) for line in out]
    skipped = [d for d in lines if d.get("type") == "not_dumped"]
    assert len(skipped) == 50 and skipped[7]["skipped"] == ["leader-epoch-checkpoint", "notes.txt",
                                                            "partition.metadata"]
    # listed once at the end, as docs/GUIDE.md says, typed apart from errors; exit 0 (issue 35)
    assert lines[-50:] == skipped and rc == 0 and err == []
    assert not any(d.get("type") == "error" for d in lines)
