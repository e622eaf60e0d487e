"""Fuzz the files beside the segments: root checkpoints, partition metadata, producer and KRaft snapshots.

At start-up a small ``log.dirs`` root is written (``fuzz/fixtures.py``, :func:`fixtures.side_root`):
a partition ``fz-0`` by ``LogWriter`` (with its ``partition.metadata``,
``leader-epoch-checkpoint`` and producer ``.snapshot`` files, and the root's offset
checkpoints), and ``__cluster_metadata-0`` with a KRaft ``.checkpoint`` and the log after
it. Each input replaces one file::

    select  uint8   % 8: which file: 0 log-start-offset-checkpoint, 1 recovery-point-offset-
                    checkpoint, 2 replication-offset-checkpoint, 3 cleaner-offset-checkpoint,
                    4 partition.metadata, 5 leader-epoch-checkpoint, 6 the last producer
                    .snapshot, 7 the KRaft .checkpoint
    file    bytes   the replacement

Then the public paths that read that file: ``open_log`` of the partition (its
``checkpoints``, ``log_start_offset``, ``verify_checkpoints()``, ``topic_id``,
``leader_epochs``, ``read()``) for 0-5; ``producer_snapshots`` (history too) and ``kbatch dump``
of the file for 6; ``cluster_metadata`` (the image, at an offset inside the checkpoint, and
history) and ``kbatch dump`` of the file for 7.

Oracle (``fuzz/oracle.py``): nothing but a kbatch error (``KBatchError``; a whole-file error
may have no byte position) escapes; a malformed checkpoint or metadata file of a partition is
a note, never an error; every table returned validates in full; ``kbatch dump`` returns 0 or 1.

Run ``python fuzz/fuzz_sidefiles.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import kbatch
    import kbatch.__main__ as cli
    import kbatch.cli._dump
    import kbatch.log._checkpoint
    import kbatch.log._producer_snapshot
    from kbatch import internal
    from kbatch.log import open_log

import fixtures
import oracle

_root = Path(tempfile.mkdtemp(prefix="kbatch-fuzz-side-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
ROOT = fixtures.side_root(_root)
FILES = fixtures.side_files(ROOT)
PART = ROOT / fixtures.PARTITION
PRISTINE = {p: p.read_bytes() for p in FILES}
PARSER = cli.build_parser()
CHECKPOINT_OFFSET = fixtures.KRAFT_CHECKPOINT_OFFSET


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, or None when it raised a kbatch error; anything else escapes (a finding)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        oracle.check_error(exc, positioned=False)
        return None


def _valid(table: Any) -> None:
    if table is not None:
        table.validate(full=True)


def _dump(path: Path) -> None:
    args = PARSER.parse_args(["dump", "--files", str(path)])
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = args.handler(args)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        oracle.check_error(exc, positioned=False)
        return
    oracle.check(rc in (0, 1), f"kbatch dump {path.name} returned {rc}")


def _partition() -> None:
    try:
        log = open_log(PART)
    except Exception as exc:  # a malformed side file is a note, not an error
        raise oracle.Finding(f"open_log raised {type(exc).__name__}: {exc}") from exc
    with log:
        oracle.check(all(isinstance(n, str) for n in log.notes), "a note that is not a string")
        oracle.check(isinstance(log.checkpoints, dict), "checkpoints is not a dict")
        _call(lambda: log.log_start_offset)
        _call(log.verify_checkpoints)
        table = _call(log.read)
        if table is not None:
            oracle.check_table(table)
        oracle.check(log.topic_id is None or isinstance(log.topic_id, str), f"topic_id {log.topic_id!r}")
        oracle.check(all(isinstance(a, int) and isinstance(b, int) for a, b in log.leader_epochs),
                     f"leader_epochs {log.leader_epochs!r}")


def TestOneInput(raw: bytes) -> None:
    if not raw:
        return
    path, body = FILES[raw[0] % len(FILES)], raw[1:]
    path.write_bytes(body)
    kbatch.log._checkpoint._cache.clear()  # keyed by inode, size and mtime: a same-size rewrite may keep all three
    try:
        if path.suffix == ".snapshot":
            _call(kbatch.log._producer_snapshot.read_snapshot, body)
            _valid(_call(internal.producer_snapshots, ROOT))
            _valid(_call(internal.producer_snapshots, ROOT, history=True))
            _dump(path)
        elif path.suffix == ".checkpoint":
            for kw in ({}, {"offset": CHECKPOINT_OFFSET - 1}, {"history": True}):
                image = _call(internal.cluster_metadata, ROOT, **kw)
                for table in (image or {}).values():
                    _valid(table)
            _dump(path)
        else:
            _partition()
    finally:
        path.write_bytes(PRISTINE[path])


def main() -> None:
    atexit.register(shutil.rmtree, _root, ignore_errors=True)  # libFuzzer ends the process with exit()
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
