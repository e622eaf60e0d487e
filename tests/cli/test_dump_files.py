"""``kbatch dump`` over what a partition directory holds beside segments: producer ``.snapshot``
files, KRaft ``.checkpoint`` snapshots and KRaft control records, directory arguments, the
``--key-decoder``/``--value-decoder`` choices, lossless ``--json`` and the command line's usage."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL_LOGS
from crc32c import crc32c
from support.control_batches import FOOTER, HEADER, KRAFT_VERSION, LEADER_CHANGE, control_batch
from support.dumprun import dump

import kbatch
from kbatch.cli import _dump
from kbatch.log import LogWriter


def producer_snapshot(entries: list[tuple[int, int, int, int, int, int, int, int]], version: int = 1) -> bytes:
    """ProducerSnapshot v1 as ProducerStateManager.writeSnapshot writes it (written here from the
    layout, independently of kbatch)."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", version, crc32c(body)) + body


def test_producer_snapshot_lines(tmp_path: Path) -> None:
    snap = tmp_path / "00000000000000000042.snapshot"
    snap.write_bytes(producer_snapshot([
        (7, 2, 14, 41, 4, 1700, 3, 30),     # an open transaction from offset 30; last batch seq 10..14
        (9, 0, 1, 5, 3, 1600, -1, -1),      # sequence wrapped: first sequence 2147483646
        (11, 1, -1, -1, 0, 1500, 0, -1),    # no batch metadata (lastOffset -1)
    ]))
    rc, out, err = dump("--files", str(snap))
    assert rc == 0 and err == []
    assert out == [
        f"Dumping {snap}",
        ("producerId: 7 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[30] "
        "lastTimestamp: 1700 firstSequence: 10 lastSequence: 14 lastOffset: 41 offsetDelta: 4 timestamp: 1700"),
        ("producerId: 9 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1600 firstSequence: 2147483646 lastSequence: 1 lastOffset: 5 offsetDelta: 3 timestamp: 1600"),
        ("producerId: 11 producerEpoch: 1 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1500"),
    ]
    rc, out, _ = dump("--files", str(snap), "--json")
    rows = [json.loads(line) for line in out]
    assert rows[1]["type"] == "producer" and rows[1]["current_txn_first_offset"] == 30
    assert rows[3]["current_txn_first_offset"] is None and "last_offset" not in rows[3]


def test_corrupt_producer_snapshots_are_one_line_each(tmp_path: Path) -> None:
    good = producer_snapshot([(7, 2, 14, 41, 4, 1700, 3, 30)])
    cases = {
        "bad-crc": good[:-1] + bytes([good[-1] ^ 1]),
        "version": producer_snapshot([], version=2),
        "short": good[:30],
        "empty": b"",
    }
    names = []
    for k, (label, raw) in enumerate(cases.items()):
        path = tmp_path / f"{k:020d}.snapshot"
        path.write_bytes(raw)
        names.append(str(path))
        assert label
    rc, out, err = dump("--files", ",".join(names))
    assert rc == 1 and len(err) == 4 and out == [f"Dumping {n}" for n in names]
    stored, computed = struct.unpack_from(">I", good, 2)[0], crc32c(cases["bad-crc"][6:])
    assert err[0] == (f"kbatch dump: {names[0]}: not a readable producer snapshot: producer snapshot crc32c "
                      f"mismatch: stored 0x{stored:08x}, computed 0x{computed:08x}")
    assert err[1].endswith("producer snapshot version 2 (only 1 exists)")
    assert err[2].endswith("1 producer entries do not fit in 20 bytes")
    assert err[3].endswith("a producer snapshot of 0 bytes (10 at least)")


def test_checkpoint_is_dumped_as_batches_with_kraft_control_records(tmp_path: Path) -> None:
    data = (control_batch([(3, HEADER)], 0)
            + kbatch.encode([b"\x01\x02"], timestamps=[51], base_offset=1)
            + control_batch([(5, KRAFT_VERSION), (4, FOOTER), (9, b"")], 2))
    snap = tmp_path / "00000000000000000005-0000000002.checkpoint"
    snap.write_bytes(data)
    rc, out, err = dump("--files", str(snap), "--deep-iteration")
    assert rc == 0 and err == []
    assert out[0] == f"Dumping {snap}" and out[1] == "Snapshot end offset: 5, epoch: 2"
    assert out[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 ") and "isControl: true" in out[2]
    # the lines of Kafka's DumpLogSegments.printControlRecord, JSON as its *JsonConverter writes it
    assert out[3] == ("| offset: 0 CreateTime: 50 keySize: 4 valueSize: 11 sequence: -1 headerKeys: [] "
                      'SnapshotHeader {"version":0,"lastContainedLogTimestamp":10000}')
    assert out[5] == "| offset: 1 CreateTime: 51 keySize: -1 valueSize: 2 sequence: -1 headerKeys: []"
    assert out[6].startswith("baseOffset: 2 lastOffset: 4 count: 3 ")
    assert out[7] == ("| offset: 2 CreateTime: 50 keySize: 4 valueSize: 5 sequence: -1 headerKeys: [] "
                      'KRaftVersion {"version":0,"kRaftVersion":1}')
    assert out[8] == ("| offset: 3 CreateTime: 50 keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] "
                      'SnapshotFooter {"version":0}')
    assert out[9] == ("| offset: 4 CreateTime: 50 keySize: 4 valueSize: 0 sequence: -1 headerKeys: [] "
                      "controlType: UNKNOWN(9)")
    assert len(out) == 10
    # --skip-record-metadata skips control records: an empty line each, as Kafka prints
    rc, out, _ = dump("--files", str(snap), "--deep-iteration", "--skip-record-metadata")
    assert out[3] == "" and out[7:10] == ["", "", ""]
    # and a record without a key starts "| payload:" (Kafka 4.x; 3.x printed " payload:")
    rc, out, _ = dump("--files", str(snap), "--skip-record-metadata", "--value-decoder", "hex")
    assert out[5] == "| payload: 0102"
    boot = tmp_path / "bootstrap.checkpoint"
    boot.write_bytes(kbatch.encode([b"x"]))
    rc, out, _ = dump("--files", str(boot))
    assert out[1] == "KRaft bootstrap snapshot" and out[2].startswith("baseOffset: 0 ")
    odd = tmp_path / "snap.checkpoint"
    odd.write_bytes(b"")
    rc, _, err = dump("--files", str(odd))
    assert rc == 1 and len(err) == 1 and "not named like a KRaft snapshot" in err[0]


def test_control_records_print_real_sizes_and_type_names(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(control_batch([(2, LEADER_CHANGE)], 0)
                    + kbatch.encode_control("abort", 5, 1, base_offset=1, coordinator_epoch=7, timestamp=60)
                    + control_batch([(2, LEADER_CHANGE[:-2])], 2))
    rc, out, err = dump("--files", str(log), "--deep-iteration")
    assert out[3] == ("| offset: 0 CreateTime: 50 keySize: 4 valueSize: 19 sequence: -1 headerKeys: [] "
                      'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],'
                      '"grantingVoters":[{"voterId":1}]}')
    assert out[5] == ("| offset: 1 CreateTime: 60 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                      "endTxnMarker: ABORT coordinatorEpoch: 7")
    # a control record that does not decode: its type named on the line, the reason on stderr, exit 1
    assert out[7].endswith("valueSize: 17 sequence: -1 headerKeys: [] controlType: LEADER_CHANGE(2)")
    assert rc == 1 and len(err) == 1 and err[0].startswith(f"kbatch dump: {log}: offset 2: LEADER_CHANGE control")
    rc, out, _ = dump("--files", str(log), "--deep-iteration", "--json")
    rows = [json.loads(line) for line in out if '"type":"control"' in line]
    assert [r["control_type"] for r in rows] == ["LEADER_CHANGE", "ABORT", "LEADER_CHANGE"]
    assert [r["value_size"] for r in rows] == [19, 6, 17]
    assert rows[0]["control"] == {"version": 0, "leaderId": 1, "voters": [{"voterId": 1}],
                                  "grantingVoters": [{"voterId": 1}]}


def test_directory_argument_dumps_every_file_in_offset_order(tmp_path: Path) -> None:
    with LogWriter(tmp_path, "t", 0, segment_bytes=100) as w:
        for k in range(3):
            w.append(kbatch.encode([b"v" * 40], base_offset=k))
    part = w.path
    (part / "00000000000000000002.snapshot").write_bytes(producer_snapshot([]))
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")
    rc, out, err = dump("--files", str(part))
    dumped = [line.split("/")[-1] for line in out if line.startswith("Dumping")]
    logs = sorted(p.name for p in part.glob("*.log"))
    assert len(logs) >= 2 and dumped[0] == logs[0] and dumped[1] == logs[0].replace(".log", ".index")
    assert dumped == sorted(dumped, key=lambda n: (int(n.split(".")[0]), n.split(".")[1] != "log"))
    assert "00000000000000000002.snapshot" in dumped
    assert rc == 0 and err == [(f"kbatch dump: {part}: not dumped (not a segment, index or snapshot file): "
                               "leader-epoch-checkpoint, partition.metadata")]


def test_key_and_value_decoders(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(kbatch.encode([struct.pack(">q", -3), struct.pack(">q", 1 << 40)],
                                  keys=[struct.pack(">i", 258), b"\xff\xfe"], timestamps=[1, 2]))
    rc, out, _ = dump("--files", str(log), "--key-decoder", "hex", "--value-decoder", "long")
    assert rc == 0
    assert out[3].endswith(" key: 00000102 payload: -3") and out[4].endswith(" key: fffe payload: 1099511627776")
    rc, out, _ = dump("--files", str(log), "--key-decoder", "base64", "--skip-record-metadata")
    assert out[3] == "| key: AAABAg== payload: " + struct.pack(">q", -3).decode("utf-8", "replace")
    # Kafka's class names, and a key the int decoder cannot read: reported, exit 1, the line still printed
    rc, out, err = dump("--files", str(log), "--key-decoder-class", "org.apache.kafka.tools.api.IntegerDecoder",
                        "--value-decoder-class", "org.apache.kafka.tools.api.LongDecoder")
    assert out[3].endswith(" key: 258 payload: -3") and out[4].startswith("| offset: 1 ")
    assert rc == 1 and err == [f"kbatch dump: {log}: offset 1: key is 2 bytes; --key-decoder int reads exactly 4"]


def test_json_keeps_every_byte_and_a_format_version(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(kbatch.encode([b"\xff\xfe", "h\u00e9".encode()], keys=[b"k", None], timestamps=[1, 2]))
    rc, out, _ = dump("--files", str(log), "--print-data-log", "--json")
    rows = [json.loads(line) for line in out]
    assert rows[0] == {"type": "file", "file": str(log), "format_version": _dump.FORMAT_VERSION}
    first, second = rows[3], rows[4]
    assert first["key"] == "k" and first["key_encoding"] == "utf8"
    assert base64.b64decode(first["payload"]) == b"\xff\xfe" and first["payload_encoding"] == "base64"
    assert second["payload"] == "h\u00e9" and second["payload_encoding"] == "utf8" and "key" not in second
    rc, out, _ = dump("--files", str(log), "--print-data-log", "--json", "--json-binary", "hex")
    assert json.loads(out[3])["payload"] == "fffe" and json.loads(out[3])["payload_encoding"] == "hex"
    rc, out, _ = dump("--files", str(log), "--json", "--value-decoder", "hex")
    assert rc == 0 and json.loads(out[4])["payload"] == "68c3a9"
    # the text form stays Kafka's: invalid UTF-8 printed as U+FFFD, as Java's new String(bytes, UTF_8)
    _rc, out, _ = dump("--files", str(log), "--print-data-log")
    assert out[3].endswith("payload: \ufffd\ufffd")


def test_max_message_size_bounds_index_lookups(tmp_path: Path) -> None:
    with LogWriter(tmp_path, "m", 0, index_interval_bytes=1) as w:
        w.append(kbatch.encode([b"a"]))
        w.append(kbatch.encode([b"b" * 300], base_offset=1))   # indexed: offset 1 at position 69
    index = w.path / "00000000000000000000.index"
    rc, out, err = dump("--files", str(index), "--verify-index-only")
    assert rc == 0 and err == [] and out == [f"Dumping {index}"]
    rc, out, err = dump("--files", str(index), "--max-message-size", "100")
    assert out == [f"Dumping {index}", "offset: 1 position: 69"]
    assert rc == 1 and err == [(f"kbatch dump: {index}: entry offset 1 position 69: no whole batch in the 100 "
                               "bytes there (--max-message-size 100)")]


def test_unknown_option_prints_dumps_usage() -> None:
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "kbatch", "dump", "--files", "x", "--no-such-option"],
                          capture_output=True, text=True, cwd=repo, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: kbatch dump ") and "--print-data-log" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == "kbatch dump: error: unrecognized arguments: --no-such-option"
    proc = subprocess.run([sys.executable, "-m", "kbatch", "dump", "--files", "x", "--offsets-decoder",
                           "--transaction-log-decoder"], capture_output=True, text=True, cwd=repo, timeout=60,
                          check=False)
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"no real broker logs at {REAL_LOGS}")
def test_real_partition_directories_dump_with_their_snapshots() -> None:
    dirs = sorted(p for p in REAL_LOGS.glob("*/*") if p.is_dir())
    rc, out, err = dump("--files", ",".join(map(str, dirs)), "--deep-iteration")
    assert rc == 0
    snapshots = sorted(REAL_LOGS.glob("*/*/*.snapshot"))
    assert snapshots and all(f"Dumping {s}" in out for s in snapshots)
    # every error line names what was left out, and only the leader-epoch checkpoints are
    assert all(e.endswith(": not dumped (not a segment, index or snapshot file): leader-epoch-checkpoint")
               for e in err)


def test_index_mismatches_as_kafka_lists_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LogWriter(tmp_path, "i", 0) as w:
        w.append(kbatch.encode([b"a"]))
        w.append(kbatch.encode([b"b"], base_offset=1))
    index = w.path / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 5, 0) + struct.pack(">ii", 6, 69))   # both entries wrong
    monkeypatch.chdir(w.path)
    rc, out, err = dump("--files", index.name, "--verify-index-only")
    # Kafka keys the report by the file's absolute path and lists the last entry first
    assert rc == 0 and out == [f"Dumping {index.name}"]
    assert err == [f"Mismatches in :{index}", "  Index offset: 6, log offset: 1", "  Index offset: 5, log offset: 0"]
