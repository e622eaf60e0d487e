"""``kbatch sample OUT``: write a small, realistic ``log.dirs`` root to try kbatch on.

What it holds (deterministic for a given seed; a few hundred KiB; well under a second)::

    orders-0 .. orders-2    magic 2, every codec (none, gzip, snappy, lz4, zstd) in turn,
                            keys, headers, idempotent producers, several segments with
                            .index / .timeindex (segment.bytes 8 KiB)
    payments-0              transactions of three producers interleaved with plain records:
                            committed, aborted (with a .txnindex) and one still open at the
                            end (so read_committed stops at its first offset)
    users-0                 compacted-looking: offset gaps, a batch emptied by the cleaner
                            (recordCount 0), and a cleaner-style delete horizon
    legacy-0                an old magic 1 segment (plain and gzip wrappers) and a magic 0
                            entry, followed by magic 2 segments, as after an upgrade
    meta.properties, recovery-point-offset-checkpoint, replication-offset-checkpoint,
    log-start-offset-checkpoint, cleaner-offset-checkpoint
                            the broker's files at the root (LogWriter writes the
                            offset checkpoints; users-0 is in the cleaner's)

>>> import tempfile
>>> from kbatch.log import open_logs
>>> summary = write_sample(tempfile.mkdtemp())
>>> sorted(summary)
['legacy-0', 'orders-0', 'orders-1', 'orders-2', 'payments-0', 'users-0']
>>> [len(d.read()) for d in open_logs(summary["orders-0"].parent, topics=["orders"])]
[300, 300, 300]
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
from pathlib import Path

from crc32c import crc32c

from kbatch._wire import CODEC_NAMES
from kbatch.codec import encode, encode_control, encode_legacy
from kbatch.log import CLEANER, LogWriter, open_log, update_checkpoint

__all__ = ["add_arguments", "run", "write_sample"]

BASE_TIMESTAMP = 1_700_000_000_000
_CODECS = tuple(CODEC_NAMES.values())  # every codec in turn: none, gzip, snappy, lz4, zstd


def empty_batch(
    base_offset: int, last_offset_delta: int, *, producer_id: int = -1, producer_epoch: int = -1,
    base_sequence: int = -1, timestamp: int = BASE_TIMESTAMP, delete_horizon: bool = False,
) -> bytes:
    """A RecordBatch with no records, as Kafka's log cleaner keeps to retain producer state.

    >>> t = kbatch.decode(empty_batch(10, 4, producer_id=5, producer_epoch=0, base_sequence=0))
    >>> len(t), t.batches["record_count"].tolist(), t.next_offset
    (0, [0], 15)
    """
    attributes = 0x40 if delete_horizon else 0
    body = struct.pack(
        ">hiqqqhii", attributes, last_offset_delta, timestamp, timestamp, producer_id, producer_epoch,
        base_sequence, 0,
    )
    head = struct.pack(">qiib", base_offset, 49, 0, 2)
    return head + struct.pack(">I", crc32c(body)) + body


_Records = tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]


def _records(rng: random.Random, n: int, start: int, ts: int) -> _Records:
    values = [
        b'{"order":%d,"item":"%s","qty":%d}' % (start + i, rng.choice([b"book", b"lamp", b"shoe"]), rng.randint(1, 9))
        for i in range(n)
    ]
    keys = [b"customer-%d" % rng.randint(1, 50) for _ in range(n)]
    stamps = [ts + 10 * i + rng.randint(0, 5) for i in range(n)]
    headers = [[("trace-id", b"%016x" % rng.getrandbits(64))] + ([("retry", b"1")] if i % 7 == 0 else [])
               for i in range(n)]
    return values, keys, stamps, headers


def _orders(root: Path, rng: random.Random, records: int) -> dict[str, Path]:
    out = {}
    for partition in range(3):
        with LogWriter(root, "orders", partition, segment_bytes=8 << 10) as w:
            offset, ts, k = 0, BASE_TIMESTAMP + partition, 0
            seq = 0
            while offset < records:
                n = min(rng.randint(5, 40), records - offset)
                values, keys, stamps, headers = _records(rng, n, offset, ts)
                codec = _CODECS[k % len(_CODECS)]
                w.append(encode(values, keys, timestamps=stamps, headers=headers, base_offset=offset,
                                       producer_id=100 + partition, producer_epoch=0, base_sequence=seq,
                                       compression=codec, partition_leader_epoch=0 if offset < records // 2 else 1))
                offset, ts, k, seq = offset + n, stamps[-1] + 1, k + 1, seq + n
            out[f"orders-{partition}"] = w.path
    return out


# The transactional script of payments-0: three producers' transactions overlap, with plain
# (non-transactional) records between; producer 2001's last transaction is never ended.
_PAYMENTS: tuple[tuple[str, int], ...] = (
    ("data", 2000), ("data", 2001), ("plain", 0), ("data", 2000), ("commit", 2000),
    ("data", 2002), ("data", 2001), ("abort", 2001), ("plain", 0), ("data", 2002),
    ("data", 2000), ("abort", 2002), ("data", 2001), ("data", 2000), ("commit", 2001),
    ("abort", 2000), ("plain", 0), ("data", 2002), ("commit", 2002), ("data", 2001),
    ("plain", 0), ("data", 2000), ("data", 2001), ("commit", 2000), ("plain", 0),
)


def _payments(root: Path, rng: random.Random) -> Path:
    """Three transactional producers and plain records, interleaved; one transaction stays open."""
    with LogWriter(root, "payments", 0, segment_bytes=2 << 10) as w:
        ts = BASE_TIMESTAMP
        for round_ in range(3):
            sequences = dict.fromkeys((2000, 2001, 2002), 0)  # a new epoch restarts them
            for kind, pid in _PAYMENTS:
                if kind == "data":
                    values = [b'{"payment":%d,"producer":%d}' % (rng.randint(0, 10**6), pid) for _ in range(3)]
                    raw = encode(values, [b"acct-%d" % rng.randint(1, 9) for _ in values],
                                        timestamps=[ts] * 3, producer_id=pid, producer_epoch=round_,
                                        base_sequence=sequences[pid], transactional=True)
                    sequences[pid] += 3
                elif kind == "plain":
                    raw = encode([b"heartbeat"], timestamps=[ts])
                else:
                    raw = encode_control(kind, pid, round_, coordinator_epoch=3, timestamp=ts)
                w.append(raw, assign_offsets=True, leader_epoch=round_)
                ts += 3
            if round_ < 2:  # close 2001's open transaction before the next round
                w.append(encode_control("commit", 2001, round_, timestamp=ts), assign_offsets=True,
                         leader_epoch=round_)
        return w.path


def _users(root: Path, rng: random.Random) -> Path:
    """What a compacted topic looks like: offset gaps, an emptied batch, a delete horizon."""
    with LogWriter(root, "users", 0, segment_bytes=4 << 10) as w:
        offset, ts = 0, BASE_TIMESTAMP
        for i in range(60):
            n = rng.randint(1, 4)
            kept = sorted(rng.sample(range(n + 3), n))  # survivors of compaction: gaps between them
            values = [None if rng.random() < 0.1 else b'{"user":%d,"v":%d}' % (offset + j, i) for j in kept]
            keys = [b"user-%d" % rng.randint(1, 20) for _ in kept]
            raw = b"".join(
                encode([v], [k], timestamps=[ts + j], base_offset=offset + j)
                for v, k, j in zip(values, keys, kept, strict=True)
            )
            w.append(raw, leader_epoch=0)
            offset += n + 3
            ts += n + 3
            if i == 20:
                w.append(empty_batch(offset, 2, producer_id=77, producer_epoch=0, base_sequence=5, timestamp=ts),
                         leader_epoch=0)
                offset += 3
            if i == 40:
                w.append(empty_batch(offset, 0, timestamp=ts, delete_horizon=True), leader_epoch=0)
                offset += 1
        return w.path


def _legacy(root: Path, rng: random.Random) -> Path:
    with LogWriter(root, "legacy", 0, segment_bytes=8 << 10) as w:
        ts = BASE_TIMESTAMP - 86_400_000
        w.append(encode_legacy([b"v0 record %d" % i for i in range(3)], magic=0, base_offset=0))
        offset = 3
        for i in range(30):
            values = [b"v1 record %d" % (offset + j) for j in range(4)]
            raw = encode_legacy(values, [b"k%d" % j for j in range(4)], timestamps=[ts + j for j in range(4)],
                                magic=1, compression=1 if i % 2 else 0, base_offset=offset)
            w.append(raw)
            offset, ts = offset + 4, ts + 10
        w.roll()
        for i in range(30):
            values, keys, stamps, headers = _records(rng, 10, offset, ts)
            w.append(encode(values, keys, timestamps=stamps, headers=headers, base_offset=offset,
                                   compression=_CODECS[i % 5]), leader_epoch=2)
            offset, ts = offset + 10, stamps[-1] + 1
        return w.path


def _root_files(root: Path, logs: dict[str, Path]) -> None:
    (root / "meta.properties").write_text(
        "#Written by kbatch sample\nversion=0\nbroker.id=0\ncluster.id=kbatch-sample-cluster0\n"
    )
    # LogWriter wrote the offset checkpoints; the cleaner's names the compacted log, cleaned to its end
    users = open_log(logs["users-0"])
    update_checkpoint(root / CLEANER, {("users", 0): users.next_offset})


def write_sample(root: str | Path, *, seed: int = 0, records: int = 300) -> dict[str, Path]:
    """Write the sample ``log.dirs`` root into ``root``; return partition name -> directory.

    Parameters
    ----------
    root : str or Path
        Created if missing; existing partition directories of the same names are appended to.
    seed : int
        Everything is drawn from ``random.Random(seed)``.
    records : int
        Records per ``orders`` partition.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    logs = _orders(root, rng, records)
    logs["payments-0"] = _payments(root, rng)
    logs["users-0"] = _users(root, rng)
    logs["legacy-0"] = _legacy(root, rng)
    _root_files(root, logs)
    return logs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch sample``'s arguments to ``parser``."""
    parser.add_argument("out", help="directory to write the log.dirs root into")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--records", type=int, default=300, help="records per orders partition (default 300)")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def run(args: argparse.Namespace) -> int:
    """Write the sample root to ``args.out``; print one line per partition; return 0.

    A path that is a file, a directory that is not empty (its files would be mixed with the
    sample's, as ``kbatch convert`` refuses an existing output), or one that cannot be written
    is a user mistake: one line, status 2. An empty directory is used.
    """
    if args.records < 1:
        print("kbatch sample: error: --records must be >= 1", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"kbatch sample: error: {out} exists and is not a directory", file=sys.stderr)
        return 2
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        count = f"{len(held):,} {'entry' if len(held) == 1 else 'entries'}"
        print(f"kbatch sample: error: {out} exists and holds {count} ({shown}): give a new or empty directory",
              file=sys.stderr)
        return 2
    try:
        logs = write_sample(out, seed=args.seed, records=args.records)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"kbatch sample: error: cannot write {exc.filename or out}: {reason}", file=sys.stderr)
        return 2
    for path in logs.values():
        with open_log(path) as log:
            records = sum(len(t) for t in log.iter_tables())
            print(
                f"{path}: {_plural(records, 'record')} at offsets {log.log_start_offset}..{log.next_offset - 1}, "
                f"{_plural(len(log.segments), 'segment')}"
            )
    return 0
