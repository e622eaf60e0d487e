"""Fuzz the log directory reader (``kbatch/log/__init__.py``) and ``kbatch dump`` with one file replaced.

At start-up a small valid partition directory is written by ``LogWriter``
(``fuzz/fixtures.py``: three segments, compressed batches, a committed and an aborted
transaction), twice: ``full/`` as written and ``bare/`` without any ``.index``,
``.timeindex`` or ``.txnindex``. Each input replaces one file of it. Input layout::

    select  uint8   bits 0-1: which file: .log, .index, .timeindex, .txnindex
                    bits 2-3: which segment (modulo the three)
                    bits 4-5: kbatch dump mode: --deep-iteration --print-data-log,
                              --verify-index-only, --index-sanity-check, or none
    offset  uint8   start offset for the offset seeks (modulo 40)
    stamp   uint8   start timestamp for the timestamp seeks: 850 + 10 * stamp
    file    bytes   the replacement file (a replaced .log is replaced in bare/ too)

Then, on both directories: ``read()``, ``read(start_offset=)``, ``read(start_timestamp=)``,
``iter_tables(start_offset=, chunk_bytes=256)``, ``read(on_corruption="skip")`` (and its
``skipped``), read_committed, ``offset_for_timestamp``; and ``kbatch dump`` on the replaced
file. Oracle: only kbatch errors escape, with a position; every table's spans inside its
data; ``kbatch dump`` returns 0 or 1 and never raises; and every read through the indexes
gives what the same read gives without them (the same records, or the same error class);
where a raise-mode read without them stops at damage that a checked index entry lets the read
jump over (as the broker's seek does), the read through the indexes must give exactly the
records the index-free read gives when it skips that damage.
That last check is skipped for inputs that replace a ``.log``, ``.index`` or ``.timeindex``
when ``KBATCH_FUZZ_KNOWN`` names ``index`` (issue 15, defects 1 and 2), and for those that
replace a ``.txnindex`` when it names ``txnindex`` (found here, see fuzz/oracle.py).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import kbatch
    import kbatch.__main__ as cli
    import kbatch.cli._dump
    import kbatch.codec._txn  # imported lazily by decode: instrument it too
    from kbatch.log import open_log

import fixtures
import oracle

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
INDEXES = SUFFIXES[1:]
DUMP_MODES = (["--deep-iteration", "--print-data-log"], ["--verify-index-only"], ["--index-sanity-check"], None)

_root = Path(tempfile.mkdtemp(prefix="kbatch-fuzz-logdir-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
FULL = fixtures.partition_dir(_root / "full")
BARE = Path(shutil.copytree(FULL, _root / "bare" / fixtures.PARTITION))
for _p in BARE.iterdir():
    if _p.suffix in INDEXES:
        _p.unlink()
STEMS = sorted({p.stem for p in FULL.iterdir() if p.suffix == ".log"})
PRISTINE = {p.name: p.read_bytes() for p in FULL.iterdir()}
PARSER = cli.build_parser()  # built once: argparse costs more than a dump of these files

#: the reads of the untouched bare/ (an input that replaces an index leaves it as written),
#: by (offset, stamp, mode): the same every time, so read once
_BARE: dict[tuple[int, int, str], dict[str, tuple[str, Any]]] = {}
_BARE_MAX = 2048


def _outcome(log: Any, name: str, fn: Callable[[Any], Any]) -> tuple[str, Any]:
    try:
        result = fn(log)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        err = oracle.check_error(exc)
        return "error", type(err).__name__
    if isinstance(result, kbatch.RecordTable):
        oracle.check_table(result)
        return "table", oracle.content(result)
    return "value", result


def _reads(path: Path, offset: int, stamp: int, mode: str = "raise") -> dict[str, tuple[str, Any]]:
    def tables(log: Any) -> Any:
        out = []
        for t in log.iter_tables(start_offset=offset, chunk_bytes=256, on_corruption=mode):
            oracle.check_table(t)
            out.append(oracle.content(t))
        return out

    def skip(log: Any) -> Any:
        t = log.read(on_corruption="skip")
        oracle.check_table(t)
        return oracle.content(t), [tuple(str(x).replace(str(path), "<dir>") for x in s) for s in log.skipped]

    reads: dict[str, Callable[[Any], Any]] = {
        "read()": lambda log: log.read(on_corruption=mode),
        f"read(start_offset={offset})": lambda log: log.read(start_offset=offset, on_corruption=mode),
        f"read(start_timestamp={stamp})": lambda log: log.read(start_timestamp=stamp, on_corruption=mode),
        f"iter_tables(start_offset={offset})": tables,
        "read(read_committed)": lambda log: log.read(isolation_level="read_committed", on_corruption=mode),
        f"offset_for_timestamp({stamp})": lambda log: log.offset_for_timestamp(stamp, on_corruption=mode),
        "read(on_corruption='skip')": skip,  # last: it fills .skipped
    }
    try:
        log = open_log(path)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        return {"open_log": ("error", type(oracle.check_error(exc)).__name__)}
    with log:  # one LogDir for all the reads, as a user would
        return {name: _outcome(log, name, fn) for name, fn in reads.items()}

def _bare_reads(offset: int, stamp: int, mode: str, pristine: bool) -> dict[str, tuple[str, Any]]:
    if not pristine:
        return _reads(BARE, offset, stamp, mode)
    key = (offset, stamp, mode)
    got = _BARE.get(key)
    if got is None:
        if len(_BARE) >= _BARE_MAX:
            del _BARE[next(iter(_BARE))]
        got = _BARE[key] = _reads(BARE, offset, stamp, mode)
    return got


def _dump(files: list[Path], mode: list[str]) -> None:
    """``kbatch dump`` on ``files``: 0 or 1; a kbatch error may reach the command line's net
    (which says it in one line and returns 1), nothing else may."""
    args = PARSER.parse_args(["dump", *mode, "--files", ",".join(map(str, files))])
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = args.handler(args)
    except Exception as exc:  # noqa: BLE001 - the oracle decides what may escape
        oracle.check_error(exc)
        return
    oracle.check(rc in (0, 1), f"kbatch dump {' '.join(mode)} returned {rc}")


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 3:
        return
    select, offset, stamp, body = raw[0], raw[1] % 40, 850 + 10 * raw[2], raw[3:]
    suffix = SUFFIXES[select & 3]
    name = STEMS[(select >> 2 & 3) % len(STEMS)] + suffix
    dirs = [FULL, BARE] if suffix == ".log" else [FULL]
    for d in dirs:
        (d / name).write_bytes(body)
    try:
        full = _reads(FULL, offset, stamp)
        bare = _bare_reads(offset, stamp, "raise", suffix != ".log")
        if suffix == ".txnindex" or not oracle.known("index"):
            bare_skip: dict[str, tuple[str, Any]] | None = None
            for what, got in full.items():
                want = bare[what]
                if got != want and suffix == ".log" and want[0] == "error" and got[0] != "error":
                    # A seek through a checked index entry jumps over the batches before it, as
                    # the broker's does; without the index a raise-mode read frames from the
                    # segment start and may stop at damage there (docs/DESIGN.md, "indexes are
                    # hints"). Then what the indexed read returns must be exactly what the
                    # index-free read returns when it skips that damage.
                    if bare_skip is None:
                        bare_skip = _bare_reads(offset, stamp, "skip", False)
                    want = bare_skip[what]
                    if _records(got) == _records(want):  # the tables may be cut elsewhere
                        continue
                if got != want:
                    raise oracle.Finding(f"{name} replaced: {what} with the indexes gives {_brief(got)}, "
                                         f"without them {_brief(want)}")
        mode = DUMP_MODES[select >> 4 & 3]
        if mode is not None:
            _dump([FULL / name] if suffix == ".log" else [FULL / name, FULL / (name.rsplit(".", 1)[0] + ".log")],
                  mode)
    finally:
        for d in dirs:
            if name in PRISTINE:
                (d / name).write_bytes(PRISTINE[name])
            else:
                (d / name).unlink()


def _records(outcome: tuple[str, Any]) -> Any:
    """The records an outcome holds, in order, whatever tables they came in (without the
    table-relative batch row number)."""
    kind, value = outcome
    if kind == "table":
        tables = [value]
    elif kind == "value" and isinstance(value, list) and all(isinstance(v, tuple) for v in value):
        tables = value
    else:
        return outcome
    return [row[:4] + row[5:] for v in tables for row in v[0]]


def _brief(outcome: tuple[str, Any]) -> str:
    kind, value = outcome
    if kind == "table":
        rows = value[0]
        return f"{len(rows)} records (offsets {[r[0] for r in rows][:12]})"
    if kind == "value" and isinstance(value, list) and value and isinstance(value[0], tuple):
        return f"{sum(len(v[0]) for v in value)} records in {len(value)} tables"
    if kind == "value" and isinstance(value, tuple):
        return f"{len(value[0][0])} records, skipped {value[1]}"
    return f"{kind} {value!r}"


def main() -> None:
    atexit.register(shutil.rmtree, _root, ignore_errors=True)  # libFuzzer ends the process with exit()
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
