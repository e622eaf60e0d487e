"""``kbatch dump``: Kafka's ``kafka-dump-log.sh`` (DumpLogSegments) without a JVM.

Same options and the same output lines as Apache Kafka's tool, so scripts written against it
keep working; ``--json`` prints one JSON object per line instead. The lines (Kafka 3.x)::

    Dumping <file>
    Log starting offset: <base offset>
    baseOffset: B lastOffset: L count: N baseSequence: S lastSequence: S producerId: P
        producerEpoch: E partitionLeaderEpoch: E isTransactional: b isControl: b
        deleteHorizonMs: OptionalLong.empty position: P CreateTime: T size: S magic: 2
        compresscodec: none crc: C isvalid: true                          (one line, magic 2)
    offset: L position: P CreateTime: T size: S magic: 1 compresscodec: gzip crc: C isvalid: true
                                                                          (magic 0 and 1)
    | offset: O CreateTime: T keySize: K valueSize: V sequence: S headerKeys: [a,b] key: k payload: v
    | offset: O CreateTime: T keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT
        coordinatorEpoch: 0
    Found N invalid bytes at the end of <file name>
    offset: O position: P                                                 (.index)
    timestamp: T offset: O                                                (.timeindex)
    version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S   (.txnindex)

>>> import kbatch, pathlib, tempfile, argparse
>>> p = pathlib.Path(tempfile.mkdtemp()) / "00000000000000000000.log"
>>> _ = p.write_bytes(kbatch.encode([b"hi"], keys=[b"k"], timestamps=[5], headers=[[("h", b"")]]))
>>> parser = argparse.ArgumentParser(); add_arguments(parser)
>>> run(parser.parse_args(["--files", str(p), "--print-data-log"]))  # doctest: +ELLIPSIS
Dumping .../00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 ... isvalid: true
| offset: 0 CreateTime: 5 keySize: 1 valueSize: 2 sequence: -1 headerKeys: [h] key: k payload: hi
0
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

import kbatch
from kbatch import _storage
from kbatch.errors import KBatchError
from kbatch.log import (
    _LOG_OVERHEAD,
    OFFSET_INDEX_DTYPE,
    TIME_INDEX_DTYPE,
    TXN_INDEX_DTYPE,
    Segment,
    _read_index,
    _scan,
)

__all__ = ["add_arguments", "run"]

_INT_MAX = 2**31 - 1
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_TS_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
_CONTROL = {0: "ABORT", 1: "COMMIT"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch dump``'s options (those of ``kafka-dump-log.sh``) to ``parser``."""
    parser.add_argument("--files", required=True, help="comma-separated data and index files to dump")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print the records' keys and values (implies --deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only check that index files are sane (as a broker does at startup)")
    parser.add_argument("--max-bytes", type=int, default=_INT_MAX,
                        help="read at most this many bytes of each .log (whole batches)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="with --print-data-log, print only keys and payloads")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, for machines")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="for files given as URLs (s3://, gs://, ...): an option of pyarrow's filesystem "
                             "for the scheme, e.g. endpoint_override=http://127.0.0.1:9000 (repeatable)")


class _Out:
    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.json = bool(args.json)
        self.out = out
        self.err = err

    def line(self, text: str, **fields: Any) -> None:
        if self.json:
            self.out.write(json.dumps(fields, separators=(",", ":")) + "\n")
        else:
            self.out.write(text + "\n")

    def error(self, text: str, **fields: Any) -> None:
        if self.json:
            self.out.write(json.dumps({"type": "error", "message": text, **fields}) + "\n")
        else:
            self.err.write(text + "\n")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _last_sequence(base: int, delta: int) -> int:
    if base == -1:
        return -1
    return base - (_INT_MAX - delta) - 1 if base > _INT_MAX - delta else base + delta


def _batch_valid(seg: Segment, h: np.void) -> bool:
    p, size = int(h["position"]), _LOG_OVERHEAD + int(h["batch_length"])
    data = seg.view(p, p + size)
    if int(h["magic"]) == 2:
        return crc32c(data[21:size]) == int(h["crc"])
    return (zlib.crc32(data[16:size]) & 0xFFFFFFFF) == int(h["crc"])


def _dump_log(path: Path, args: argparse.Namespace, o: _Out, gaps: dict[str, list[tuple[int, int]]]) -> int:
    seg = Segment(path)
    o.line(f"Log starting offset: {seg.base_offset}", type="segment", file=str(path), base_offset=seg.base_offset)
    end = min(seg.size, max(0, int(args.max_bytes)))
    data = seg.view(0, end)  # a remote .log: only these bytes are fetched
    heads, stop, err, _ = _scan(data, 0, end, 1 << 62, seg.path)
    deep = args.deep_iteration or args.print_data_log
    last_offset = -1
    rc = 0
    chunk = 2048
    for first in range(0, len(heads), chunk):
        block = heads[first : first + chunk]
        table = None
        if deep and len(block):
            a = int(block["position"][0])
            b = int(block["position"][-1]) + _LOG_OVERHEAD + int(block["batch_length"][-1])
            try:
                table = kbatch.decode(data[a:b], verify_crc=False)
            except KBatchError as exc:
                table = exc.partial if isinstance(exc.partial, kbatch.RecordTable) else None
                o.error(f"kbatch dump: {path}: {exc.reason} at byte {a + max(exc.position, 0)}",
                        file=str(path), position=a + max(exc.position, 0))
                rc = 1
        record_batch = table.records["batch"] if table is not None else np.zeros(0, np.int32)
        bounds = np.searchsorted(record_batch, np.arange(len(block) + 1)) if table is not None else None
        for k in range(len(block)):
            h = block[k]
            _print_batch(seg, h, o, path)
            if table is None or bounds is None or k >= len(table.batches):
                continue
            for i in range(int(bounds[k]), int(bounds[k + 1])):
                offset = int(table.records["offset"][i])
                if last_offset != -1 and offset != last_offset + 1:
                    gaps.setdefault(str(path), []).append((last_offset, offset))
                last_offset = offset
                _print_record(table, i, h, o, args)
            if h["is_control"] and int(h["magic"]) == 2:
                offset = int(h["base_offset"])
                if last_offset != -1 and offset != last_offset + 1:
                    gaps.setdefault(str(path), []).append((last_offset, offset))
                last_offset = offset
                _print_control(h, o, args)
    trailing = seg.size - stop
    if err is None and not len(heads) and seg.size and int(args.max_bytes) >= seg.size:
        o.error(f"kbatch dump: {path}: not a Kafka log: no complete batch in its {seg.size} bytes", file=str(path))
        return 1
    if err is not None:
        o.error(f"kbatch dump: {path}: {err.reason.replace(f' in {seg.path}', '')} at byte {err.position}",
                file=str(path), position=err.position)
        rc = 1
    if trailing > 0 and int(args.max_bytes) == _INT_MAX:
        o.line(f"Found {trailing} invalid bytes at the end of {path.name}", type="invalid_bytes",
               file=str(path), position=stop, length=trailing)
    seg.close()
    return rc


def _print_batch(seg: Segment, h: np.void, o: _Out, path: Path) -> None:
    magic = int(h["magic"])
    ts_name = _TS_TYPES.get(int(h["timestamp_type"]), "NoTimestampType")
    size = _LOG_OVERHEAD + int(h["batch_length"])
    valid = _batch_valid(seg, h)
    base, last = int(h["base_offset"]), int(h["base_offset"]) + int(h["last_offset_delta"])
    codec = _CODECS[int(h["compression"])] if 0 <= int(h["compression"]) < 5 else str(int(h["compression"]))
    tail = (
        f" position: {int(h['position'])} {ts_name}: {int(h['max_timestamp'])} size: {size} magic: {magic}"
        f" compresscodec: {codec} crc: {int(h['crc'])} isvalid: {str(valid).lower()}"
    )
    fields: dict[str, Any] = {
        "type": "batch", "file": str(path), "base_offset": base, "last_offset": last,
        "position": int(h["position"]), "timestamp_type": ts_name, "max_timestamp": int(h["max_timestamp"]),
        "size": size, "magic": magic, "compression": codec, "crc": int(h["crc"]), "is_valid": valid,
    }
    if magic >= 2:
        horizon = f"OptionalLong[{int(h['base_timestamp'])}]" if h["has_delete_horizon"] else "OptionalLong.empty"
        seq = int(h["base_sequence"])
        last_seq = _last_sequence(seq, int(h["last_offset_delta"]))
        head = (
            f"baseOffset: {base} lastOffset: {last} count: {int(h['record_count'])} baseSequence: {seq}"
            f" lastSequence: {last_seq} producerId: {int(h['producer_id'])}"
            f" producerEpoch: {int(h['producer_epoch'])} partitionLeaderEpoch: {int(h['partition_leader_epoch'])}"
            f" isTransactional: {str(bool(h['is_transactional'])).lower()}"
            f" isControl: {str(bool(h['is_control'])).lower()} deleteHorizonMs: {horizon}"
        )
        fields.update(
            count=int(h["record_count"]), base_sequence=seq, last_sequence=last_seq,
            producer_id=int(h["producer_id"]), producer_epoch=int(h["producer_epoch"]),
            partition_leader_epoch=int(h["partition_leader_epoch"]),
            is_transactional=bool(h["is_transactional"]), is_control=bool(h["is_control"]),
            delete_horizon_ms=int(h["base_timestamp"]) if h["has_delete_horizon"] else None,
        )
    else:
        head = f"offset: {last}"
    o.line(head + tail, **fields)


def _print_record(table: kbatch.RecordTable, i: int, h: np.void, o: _Out, args: argparse.Namespace) -> None:
    r = table.records[i]
    magic = int(h["magic"])
    ts_name = _TS_TYPES.get(int(h["timestamp_type"]), "NoTimestampType")
    key, value = table.key(i), table.value(i)
    parts: list[str] = []
    fields: dict[str, Any] = {"type": "record", "offset": int(r["offset"])}
    prefix = "| "
    if not args.skip_record_metadata:
        parts.append(
            f"| offset: {int(r['offset'])} {ts_name}: {int(r['timestamp'])} keySize: {int(r['key_length'])}"
            f" valueSize: {int(r['value_length'])}"
        )
        fields.update(timestamp_type=ts_name, timestamp=int(r["timestamp"]), key_size=int(r["key_length"]),
                      value_size=int(r["value_length"]))
        if magic >= 2:
            keys = [k for k, _ in table.headers(i)]
            parts.append(f" sequence: {int(r['sequence'])} headerKeys: [{','.join(keys)}]")
            fields.update(sequence=int(r["sequence"]), header_keys=keys)
        elif int(h["compression"]) == 0:
            parts.append(f" isValid: true crc: {int(h['crc'])}}}")
        prefix = " "
    if args.print_data_log:
        if key is not None:
            parts.append(f"{prefix}key: {_text(key)}")
            fields["key"] = _text(key)
        if value is not None:
            parts.append(f" payload: {_text(value)}")
            fields["payload"] = _text(value)
    o.line("".join(parts), **fields)


def _print_control(h: np.void, o: _Out, args: argparse.Namespace) -> None:
    if args.skip_record_metadata:
        return
    kind = int(h["control_type"])
    ts_name = _TS_TYPES.get(int(h["timestamp_type"]), "NoTimestampType")
    text = (f"| offset: {int(h['base_offset'])} {ts_name}: {int(h['max_timestamp'])} keySize: 4 valueSize: 6"
            f" sequence: {int(h['base_sequence'])} headerKeys: []")
    if kind in _CONTROL:
        text += f" endTxnMarker: {_CONTROL[kind]} coordinatorEpoch: {int(h['coordinator_epoch'])}"
    else:
        text += f" controlType: UNKNOWN({kind})"
    o.line(text, type="control", offset=int(h["base_offset"]), control_type=_CONTROL.get(kind, str(kind)),
           coordinator_epoch=int(h["coordinator_epoch"]))


def _log_for(path: Path) -> Segment | None:
    log = path.with_suffix(".log")
    return Segment(log) if log.is_file() else None


def _sanity(path: Path, entries: npt.NDArray[Any], size: int, itemsize: int, kind: str) -> str | None:
    if size % itemsize:
        return (f"Index file {path.name} is corrupt, found {size} bytes which is neither positive nor a multiple "
                f"of {itemsize}.")
    rel = entries["relative_offset"].astype(np.int64)
    if len(rel) and (np.any(np.diff(rel) < 0) or rel[0] < 0):
        return f"Corrupt {kind} index found, offsets are not increasing in {path.name}"
    return None


def _index_prologue(
    path: Path, dtype: Any, entry_size: int, kind: str, args: argparse.Namespace, o: _Out
) -> tuple[int, Any] | int:
    """An index file's base offset and entries, or the exit status when there is nothing more to
    print: the file is empty, or ``--index-sanity-check`` was asked for (and is printed here)."""
    entries = _read_index(path, dtype)
    assert entries is not None
    if len(entries) == 0:
        o.line(f"{path} is empty.", type="empty_index", file=str(path))
        return 0
    if args.index_sanity_check:
        problem = _sanity(path, entries, path.stat().st_size, entry_size, kind)
        if problem:
            o.error(f"kbatch dump: {problem}", file=str(path))
            return 1
        o.line(f"{path} passed sanity check.", type="sanity_check", file=str(path), passed=True)
        return 0
    return int(path.name.split(".")[0]), entries


def _dump_index(path: Path, args: argparse.Namespace, o: _Out, mismatches: dict[str, list[tuple[int, int]]]) -> int:
    checked = _index_prologue(path, OFFSET_INDEX_DTYPE, 8, "offset", args, o)
    if isinstance(checked, int):
        return checked
    base, entries = checked
    seg = _log_for(path)
    for e in entries:
        offset, position = base + int(e["relative_offset"]), int(e["position"])
        if seg is not None:
            got, _, _, _ = _scan(seg.data, position, seg.size, 1, seg.path)
            if len(got):
                h = got[0]
                found = int(h["base_offset"]) + int(h["last_offset_delta"])
                if found != offset:
                    mismatches.setdefault(str(path), []).append((offset, found))
        if not args.verify_index_only:
            o.line(f"offset: {offset} position: {position}", type="index_entry", offset=offset, position=position)
    return 0


def _dump_timeindex(path: Path, args: argparse.Namespace, o: _Out, problems: list[str]) -> int:
    checked = _index_prologue(path, TIME_INDEX_DTYPE, 12, "time", args, o)
    if isinstance(checked, int):
        return checked
    base, entries = checked
    seg = _log_for(path)
    heads = seg.scan("skip") if seg is not None else None
    prev = -1
    for e in entries:
        ts, offset = int(e["timestamp"]), base + int(e["relative_offset"])
        if heads is not None and seg is not None:
            last = heads["base_offset"] + heads["last_offset_delta"]
            k = int(np.searchsorted(last, offset))
            if k >= len(heads) or int(last[k]) != offset:
                found = int(last[k]) if k < len(heads) else -1
                problems.append(f"The following indexed offsets are not found in the log.\n"
                                f"Indexed offset: {offset}, found log offset: {found}")
            else:
                h = heads[k]
                p = int(h["position"])
                try:
                    t = kbatch.decode(seg.view(p, p + _LOG_OVERHEAD + int(h["batch_length"])), verify_crc=False)
                    logged = int(t.records["timestamp"].max()) if len(t) else int(h["max_timestamp"])
                except KBatchError:
                    logged = int(h["max_timestamp"])
                if logged != ts:
                    problems.append(f"Found timestamp mismatch in :{path}\n"
                                    f"  Index timestamp: {ts}, log timestamp: {logged}")
                if prev >= ts:
                    problems.append(f"Found out of order timestamp in :{path}\n"
                                    f"  Index timestamp: {ts}, Previously indexed timestamp: {prev}")
        prev = ts
        if not args.verify_index_only:
            o.line(f"timestamp: {ts} offset: {offset}", type="timeindex_entry", timestamp=ts, offset=offset)
    return 0


def _dump_txnindex(path: Path, args: argparse.Namespace, o: _Out) -> int:
    entries = _read_index(path, TXN_INDEX_DTYPE)
    assert entries is not None
    for e in entries:
        v, pid, first, last, lso = (int(e[n]) for n in TXN_INDEX_DTYPE.names or ())
        o.line(f"version: {v} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}",
               type="aborted_txn", version=v, producer_id=pid, first_offset=first, last_offset=last,
               last_stable_offset=lso)
    return 0


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump the files named by ``args.files``; return the exit status (0 ok, 1 a file failed)."""
    o = _Out(args, out or sys.stdout, err or sys.stderr)
    rc = 0
    mismatches: dict[str, list[tuple[int, int]]] = {}
    gaps: dict[str, list[tuple[int, int]]] = {}
    problems: list[str] = []
    handlers: dict[str, Callable[[Path], int]] = {
        ".log": lambda p: _dump_log(p, args, o, gaps),
        ".index": lambda p: _dump_index(p, args, o, mismatches),
        ".timeindex": lambda p: _dump_timeindex(p, args, o, problems),
        ".txnindex": lambda p: _dump_txnindex(p, args, o),
    }
    for name in [f for f in str(args.files).split(",") if f]:
        path: Any = Path(name)
        if _storage.is_remote(name):
            path = _storage.StoragePath(_storage.locate(name, storage_options=_storage.parse_options(
                getattr(args, "storage_option", None))))
        o.line(f"Dumping {path}", type="file", file=str(path))
        handler = handlers.get(path.suffix)
        if handler is None:
            o.error(f"Ignoring unknown file {path}", file=str(path))
            continue
        try:
            if not path.is_file():
                raise FileNotFoundError("no such file")
            rc = max(rc, handler(path))
        except BrokenPipeError:
            raise
        except (OSError, ValueError, KBatchError) as exc:
            reason = exc.reason if isinstance(exc, KBatchError) else (exc.strerror or str(exc)) if isinstance(
                exc, OSError) else str(exc)
            o.error(f"kbatch dump: {path}: not a readable Kafka {path.suffix[1:]} file: {reason}", file=str(path))
            rc = 1
    for name, pairs in mismatches.items():
        o.error(f"Mismatches in :{name}" + "".join(f"\n  Index offset: {a}, log offset: {b}" for a, b in pairs),
                file=name)
    for problem in problems:
        o.error(problem)
    for name, pairs in gaps.items():
        o.error(f"Non-consecutive offsets in {name}" + "".join(f"\n  {a} is followed by {b}" for a, b in pairs),
                file=name)
    return rc


def main(argv: list[str] | None = None) -> int:
    """``python -m kbatch._dump ...`` until ``kbatch dump`` is wired into ``kbatch.__main__``."""
    parser = argparse.ArgumentParser(prog="kbatch dump", description=__doc__.split("\n")[0] if __doc__ else None)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except BrokenPipeError:  # `kbatch dump ... | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
