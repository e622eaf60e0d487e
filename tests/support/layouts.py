"""Folders laid out the ways a user gets wrong: logs deeper than the path given, a root for a
partition directory, ``.log`` files not named as segments."""

from __future__ import annotations

from pathlib import Path

import kbatch
from kbatch.log import LogWriter


def backup_with_deeper_roots(base: Path) -> tuple[Path, list[Path]]:
    """``base/backup`` holding no partition directory itself but two ``log.dirs`` roots below
    (``broker-1/kafka-logs``, ``broker-2/data/kafka-logs``), each with ``orders-0`` (3 records).
    Returns the backup folder and the roots."""
    backup = base / "backup"
    roots = [backup / "broker-1" / "kafka-logs", backup / "broker-2" / "data" / "kafka-logs"]
    for root in roots:
        with LogWriter(root, "orders", 0) as w:
            w.append(kbatch.encode([b"a", b"b", b"c"]))
    (backup / "README.txt").write_text("copied from the brokers\n")
    return backup, roots


def partition_with_misnamed_logs(base: Path, with_segment: bool) -> Path:
    """``base/orders-0`` whose ``.log`` files are not named as segments (``0.log``,
    ``server.log``), and, with ``with_segment``, a real segment of 2 records beside them."""
    part = base / "orders-0"
    if with_segment:
        with LogWriter(base, "orders", 0) as w:
            w.append(kbatch.encode([b"x", b"y"]))
    part.mkdir(parents=True, exist_ok=True)
    raw = kbatch.encode([b"lost"])
    (part / "0.log").write_bytes(raw)
    (part / "server.log").write_text("INFO started\n")
    return part
