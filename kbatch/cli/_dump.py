"""``kbatch dump``: Kafka's ``kafka-dump-log.sh`` (DumpLogSegments) without a JVM.

Same options and the same output lines as Apache Kafka's tool, so scripts written against it
keep working; ``--json`` prints one JSON object per line instead. The lines (Kafka 4.x)::

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
        coordinatorEpoch: 0                                               (transaction markers)
    Found N invalid bytes at the end of <file name>
    offset: O position: P                                                 (.index)
    timestamp: T offset: O                                                (.timeindex)
    version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S   (.txnindex)
    producerId: P producerEpoch: E coordinatorEpoch: C currentTxnFirstOffset: OptionalLong.empty
        lastTimestamp: T firstSequence: F lastSequence: L lastOffset: O offsetDelta: D timestamp: T
                                                                          (.snapshot, one per producer)
    Snapshot end offset: O, epoch: E                                      (.checkpoint, then its batches)
    | offset: O CreateTime: T keySize: 4 valueSize: V sequence: -1 headerKeys: [] SnapshotHeader {...}
                                                                          (KRaft control records)

The lines are those of Kafka 4.x's ``tools/.../DumpLogSegments.java``. A directory argument
dumps every segment, index and snapshot file in it in offset order. ``--json`` lines carry
``format_version`` (in each ``file`` object) and never lose bytes: ``key_encoding`` and
``payload_encoding`` say how ``key``/``payload`` hold them: ``utf8``, ``base64`` or ``hex``
(keys and values that are not UTF-8 are written as ``--json-binary`` says), ``long``/``int``/
``hex``/``base64`` (``--key-decoder``/``--value-decoder``), ``json`` (an internal-topic decoder's
Kafka JSON, as an object), ``avro`` (``--value-decoder avro``: a registry-framed Avro value as a
JSON value; ``json`` / ``protobuf`` alike for JSON Schema and Protobuf values,
:mod:`kbatch.cli._dump_values`) or ``text`` (its other words, ``<DELETE>``, ``Error at ...`` or
``Error: ...``).

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
import base64
import json
import mmap
import re
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kbatch import storage
from kbatch._wire import ATTRIBUTES_OFFSET, CODEC_NAMES, CONTROL_RECORD_TYPES, LEGACY_MAGIC_OFFSET, LOG_OVERHEAD
from kbatch.codec import RecordTable, decode
from kbatch.errors import KBatchError
from kbatch.log import (
    OFFSET_INDEX_DTYPE,
    TIME_INDEX_DTYPE,
    TXN_INDEX_DTYPE,
    Segment,
    read_index,
    read_snapshot,
    scan_headers,
)
from kbatch.protocol import KafkaJson

from ._dump_internal import control_json, topic_parser
from ._dump_values import AvroDecoder, AvroText

__all__ = ["FORMAT_VERSION", "add_arguments", "run"]

#: Version of the ``--json`` line format (in every ``file`` object). 1: keys and payloads with
#: their ``key_encoding``/``payload_encoding``, nothing lost.
FORMAT_VERSION = 1

_INT_MAX = 2**31 - 1
#: A batch header row (``BATCH_DTYPE`` fields) as a dict of Python values.
_Head = dict[str, Any]
_TS_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
#: Kafka's ControlRecordType (clients/.../record/ControlRecordType.java).
CONTROL_TYPES = CONTROL_RECORD_TYPES
_DEFAULT_MAX_MESSAGE = 5 * 1024 * 1024
_DECODERS = ("string", "long", "int", "hex", "base64")
#: Decoders through a schema registry (kbatch.values): the value's language.
_REGISTRY_DECODERS = ("avro", "json", "protobuf")
#: Kafka's Decoder classes that have a kbatch equivalent (``--key-decoder-class``).
_KAFKA_DECODERS = {
    "org.apache.kafka.tools.api.StringDecoder": "string",
    "org.apache.kafka.tools.api.LongDecoder": "long",
    "org.apache.kafka.tools.api.IntegerDecoder": "int",
    "kafka.serializer.StringDecoder": "string",
    "kafka.serializer.LongDecoder": "long",
    "kafka.serializer.IntegerDecoder": "int",
}
#: The files a directory argument dumps, in the order they are dumped for one offset.
_SUFFIX_ORDER = {".log": 0, ".index": 1, ".timeindex": 2, ".txnindex": 3, ".snapshot": 4, ".checkpoint": 5}
_CHECKPOINT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_ATTR_CONTROL_BYTE = ATTRIBUTES_OFFSET + 1  # low byte of a v2 batch's attributes; bit 5 marks a control batch


def _kafka_decoder(text: str) -> str:
    if text in _DECODERS:
        return text
    if text in _KAFKA_DECODERS:
        return _KAFKA_DECODERS[text]
    raise argparse.ArgumentTypeError(
        f"{text!r} cannot be loaded (kbatch runs no JVM): give Kafka's StringDecoder, LongDecoder or "
        f"IntegerDecoder, or use --key-decoder/--value-decoder {{{','.join(_DECODERS)}}}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch dump``'s options (those of ``kafka-dump-log.sh``) to ``parser``."""
    parser.add_argument("--files", required=True,
                        help="comma-separated data, index, .snapshot and .checkpoint files or directories to dump")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print the records' keys and values (implies --deep-iteration; set by any decoder)")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only check that index files are sane (as a broker does at startup)")
    parser.add_argument("--max-bytes", type=int, default=_INT_MAX,
                        help="read at most this many bytes of each .log (whole batches)")
    parser.add_argument("--max-message-size", type=int, default=_DEFAULT_MAX_MESSAGE, metavar="SIZE",
                        help="largest batch an .index entry may point at (default 5 MiB)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="with --print-data-log, print only keys and payloads")
    parser.add_argument("--key-decoder", choices=(*_DECODERS, *_REGISTRY_DECODERS), default=None,
                        help="how keys are printed (default string: UTF-8; avro: registry-framed Avro as JSON; "
                             "json: registry-framed JSON Schema values, typed by their schema; protobuf: "
                             "registry-framed Protobuf as JSON)")
    parser.add_argument("--value-decoder", choices=(*_DECODERS, *_REGISTRY_DECODERS), default=None,
                        help="how payloads are printed (default string: UTF-8; avro: registry-framed Avro as JSON; "
                             "json: registry-framed JSON Schema values, typed by their schema; protobuf: "
                             "registry-framed Protobuf as JSON)")
    parser.add_argument("--registry", default=None, metavar="URL|PATH",
                        help="with an avro decoder: the schema registry (a URL, a log.dirs root or backup with its "
                             "_schemas topic, or a directory of schema files); default the _schemas topic of the "
                             "root the dumped files are in")
    parser.add_argument("--reader-schema", default=None, metavar="ID|FILE|TEXT",
                        help="with --value-decoder avro|json|protobuf: the schema values are read as (Avro, JSON "
                             "Schema or .proto; default the subject's latest version)")
    parser.add_argument("--key-decoder-class", type=_kafka_decoder, nargs="?", const="string", default=None,
                        metavar="CLASS", help="Kafka's spelling of --key-decoder (its String/Long/IntegerDecoder)")
    parser.add_argument("--value-decoder-class", type=_kafka_decoder, nargs="?", const="string", default=None,
                        metavar="CLASS", help="Kafka's spelling of --value-decoder")
    topic = parser.add_mutually_exclusive_group()
    for name, what in _TOPIC_DECODERS.items():
        topic.add_argument(f"--{name}", action="store_true", help=f"decode records as {what}")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, for machines")
    parser.add_argument("--json-binary", choices=("base64", "hex"), default="base64",
                        help="with --json, how keys and payloads that are not UTF-8 are written (default base64)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="for files given as URLs (s3://, gs://, ...): an option of pyarrow's filesystem "
                             "for the scheme, e.g. endpoint_override=http://127.0.0.1:9000 (repeatable)")


#: The internal-topic decoders (``--NAME``) and what they read.
_TOPIC_DECODERS = {
    "offsets-decoder": "offset data from the __consumer_offsets topic",
    "transaction-log-decoder": "transaction metadata from the __transaction_state topic",
    "cluster-metadata-decoder": "cluster metadata records (__cluster_metadata and .checkpoint files)",
    "remote-log-metadata-decoder": "TopicBasedRemoteLogMetadataManager records (__remote_log_metadata)",
    "share-group-state-decoder": "share group state from the __share_group_state topic",
}


class _Out:
    """Output lines, buffered (written a few thousand at a time); in text mode errors go to
    stderr after what is buffered, so the two streams stay in order on a terminal."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.json = bool(args.json)
        self.out = out
        self.err = err
        self._buf: list[str] = []

    def line(self, text: str, **fields: Any) -> None:
        self._buf.append(json.dumps(fields, separators=(",", ":"), ensure_ascii=False) if self.json else text)
        if len(self._buf) >= 4096:
            self.flush()

    def error(self, text: str, **fields: Any) -> None:
        if self.json:
            self._buf.append(json.dumps({"type": "error", "message": text, **fields}, ensure_ascii=False))
        else:
            self.flush()
            self.err.write(text + "\n")

    def flush(self) -> None:
        if self._buf:
            self.out.write("\n".join(self._buf) + "\n")
            self._buf.clear()


class _Rows:
    """A decoded table's record columns as Python lists: one conversion per chunk of batches
    instead of a NumPy scalar per field per record."""

    def __init__(self, table: RecordTable) -> None:
        r = table.records
        self.table = table
        self.offset: list[int] = r["offset"].tolist()
        self.timestamp: list[int] = r["timestamp"].tolist()
        self.key_length: list[int] = r["key_length"].tolist()
        self.value_length: list[int] = r["value_length"].tolist()
        self.sequence: list[int] = r["sequence"].tolist()
        self.headers_count: list[int] = r["headers_count"].tolist()
        self.keys: list[Any] = table.keys()  # bytes, or AvroText once an avro decoder ran
        self.values: list[Any] = table.values()

    def header_keys(self, i: int) -> list[str]:
        return [k for k, _ in self.table.headers(i)] if self.headers_count[i] else []


class _DecodeError(ValueError):
    """A key or value the chosen decoder cannot read (reported, never dropped)."""


class _Parser:
    """Kafka's MessageParser: a record's key and value as the printed ``key:``/``payload:`` text
    (None: not printed), and, for ``--json``, as fields with their encodings. An internal-topic
    decoder (``--offsets-decoder``, ...) replaces the key and value decoders, as in Kafka."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.key = args.key_decoder or args.key_decoder_class or "string"
        self.value = args.value_decoder or args.value_decoder_class or "string"
        self.binary = str(args.json_binary)
        chosen = [n.replace("-", "_") for n in _TOPIC_DECODERS if getattr(args, n.replace("-", "_"), False)]
        self.topic = None
        if chosen:
            self.topic = topic_parser(chosen[0])

    @staticmethod
    def _text(raw: bytes | AvroText, how: str, what: str) -> str:
        if isinstance(raw, AvroText):
            return raw.text
        if how == "string":
            return raw.decode("utf-8", "replace")  # as Java's new String(bytes, UTF_8)
        if how == "hex":
            return raw.hex()
        if how == "base64":
            return base64.b64encode(raw).decode("ascii")
        size = 8 if how == "long" else 4
        if len(raw) != size:
            raise _DecodeError(f"{what} is {len(raw)} bytes; --{what}-decoder {how} reads exactly {size}")
        return str(int.from_bytes(raw, "big", signed=True))

    def _json(self, raw: bytes | AvroText, how: str, what: str) -> tuple[Any, str]:
        if isinstance(raw, AvroText):
            return (raw.text, "text") if raw.error is not None else (raw.value, raw.kind)
        if how == "string":
            try:
                return raw.decode("utf-8"), "utf8"
            except UnicodeDecodeError:
                how = self.binary
        if how in ("long", "int"):
            return int(self._text(raw, how, what)), how
        return self._text(raw, how, what), how

    def parse(self, key: bytes | None, value: bytes | None, offset: int) -> tuple[Any, Any, str | None]:
        """(key text, payload text, why the record did not decode or None); texts are None when
        not printed and :class:`KafkaJson` when they are an internal-topic decoder's JSON."""
        if self.topic is not None:
            return self.topic.parse(key, value, offset)
        return (None if key is None else self._text(key, self.key, "key"),
                None if value is None else self._text(value, self.value, "value"), _avro_problem(key, value))

    def parse_json(self, key: bytes | None, value: bytes | None, offset: int) -> tuple[dict[str, Any], str | None]:
        fields: dict[str, Any] = {}
        if self.topic is not None:
            k, v, problem = self.topic.parse(key, value, offset)
            for name, text in (("key", k), ("payload", v)):
                if text is not None:
                    is_json = isinstance(text, KafkaJson)
                    fields[name] = json.loads(text) if is_json else text
                    fields[f"{name}_encoding"] = "json" if is_json else "text"
            if problem is not None:
                fields["error"] = problem
            return fields, problem
        if key is not None:
            fields["key"], fields["key_encoding"] = self._json(key, self.key, "key")
        if value is not None:
            fields["payload"], fields["payload_encoding"] = self._json(value, self.value, "value")
        problem = _avro_problem(key, value)
        if problem is not None:
            fields["error"] = problem
        return fields, problem


def _avro_problem(key: Any, value: Any) -> str | None:
    """Why an avro-decoded key or value did not decode (the key's first), or None."""
    for x in (key, value):
        if isinstance(x, AvroText) and x.error is not None:
            return x.error
    return None


def _last_sequence(base: int, delta: int) -> int:
    if base == -1:
        return -1
    return base - (_INT_MAX - delta) - 1 if base > _INT_MAX - delta else base + delta


def _int32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _batch_valid(data: memoryview, h: _Head) -> bool:
    p, size = int(h["position"]), LOG_OVERHEAD + int(h["batch_length"])
    if int(h["magic"]) == 2:
        return crc32c(data[p + ATTRIBUTES_OFFSET : p + size]) == int(h["crc"])
    return (zlib.crc32(data[p + LOG_OVERHEAD + LEGACY_MAGIC_OFFSET : p + size]) & 0xFFFFFFFF) == int(h["crc"])


class _Ctx:
    """What one run shares between files: options, output, the parser and what goes to stderr last."""

    def __init__(self, args: argparse.Namespace, o: _Out) -> None:
        self.args = args
        self.o = o
        self.parser = _Parser(args)
        self.print_data = bool(args.print_data_log or args.key_decoder or args.value_decoder
                               or args.key_decoder_class or args.value_decoder_class
                               or any(getattr(args, n.replace("-", "_")) for n in _TOPIC_DECODERS))
        self.deep = bool(args.deep_iteration) or self.print_data
        self.gaps: dict[str, list[tuple[int, int]]] = {}
        self.mismatches: dict[str, list[tuple[int, int]]] = {}
        self.problems: list[str] = []
        self.undecoded: dict[str, list[tuple[int, str]]] = {}
        #: directory -> the entries in it not dumped (listed at the end: one stderr line, or a JSON line each)
        self.not_dumped: dict[str, list[str]] = {}
        self.rc = 0
        keys, vals = args.key_decoder in _REGISTRY_DECODERS, args.value_decoder in _REGISTRY_DECODERS
        self.avro = AvroDecoder(keys, vals, getattr(args, "registry", None), getattr(args, "reader_schema", None),
                                str(args.json_binary), formats={"key": args.key_decoder, "value": args.value_decoder}) \
            if (keys or vals) and self.parser.topic is None else None

    def fail(self, path: Path, text: str, **fields: Any) -> None:
        self.o.error(f"kbatch dump: {path}: {text}", file=str(path), **fields)
        self.rc = 1


class _Mapped:
    """A file's bytes, memory-mapped (or empty): what ``_dump_records`` reads."""

    def __init__(self, path: Path) -> None:
        self.size = path.stat().st_size
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        self.data = memoryview(self._mmap) if self._mmap is not None else memoryview(b"")

    def close(self) -> None:
        self.data.release()
        if self._mmap is not None:
            self._mmap.close()
        self._file.close()


def _dump_log(path: Path, ctx: _Ctx) -> None:
    seg = Segment(path)
    ctx.o.line(f"Log starting offset: {seg.base_offset}", type="segment", file=str(path),
               base_offset=seg.base_offset)
    try:
        # a remote .log: only the bytes --max-bytes asks for are fetched
        data = seg.view(0, min(seg.size, max(0, int(ctx.args.max_bytes)))) if seg.is_remote else seg.data
        _dump_records(path, data, seg.size, ctx)
    finally:
        seg.close()


def _dump_checkpoint(path: Path, ctx: _Ctx) -> None:
    """A KRaft snapshot (``<end offset>-<epoch>.checkpoint``): record batches, as a segment."""
    if path.name == _BOOTSTRAP_CHECKPOINT:
        ctx.o.line("KRaft bootstrap snapshot", type="snapshot", file=str(path), bootstrap=True)
    else:
        m = _CHECKPOINT_NAME.match(path.name)
        if m is None:
            raise ValueError(f"{path.name} is not named like a KRaft snapshot (<20-digit end offset>-<10-digit "
                             "epoch>.checkpoint)")
        end, epoch = int(m.group(1)), int(m.group(2))
        ctx.o.line(f"Snapshot end offset: {end}, epoch: {epoch}", type="snapshot", file=str(path),
                   end_offset=end, epoch=epoch)
    loc = getattr(path, "location", None)  # a StoragePath: a remote snapshot
    if loc is not None:  # one read of what --max-bytes asks for
        size = path.stat().st_size
        reader = storage.RangeReader(loc, size, ahead=0)
        try:
            _dump_records(path, reader.view(0, min(size, max(0, int(ctx.args.max_bytes))))[0], size, ctx)
        finally:
            reader.close()
        return
    mapped = _Mapped(path)
    try:
        _dump_records(path, mapped.data, mapped.size, ctx)
    finally:
        mapped.close()


def _dump_records(path: Path, data: memoryview, size: int, ctx: _Ctx) -> None:
    args, o = ctx.args, ctx.o
    end = min(size, max(0, int(args.max_bytes)))
    heads, stop, err, _ = scan_headers(data, 0, end, 1 << 62, path)
    last_offset = -1
    chunk = 2048
    for first in range(0, len(heads), chunk):
        block = heads[first : first + chunk]
        table = None
        if ctx.deep and len(block):
            a = int(block["position"][0])
            b = int(block["position"][-1]) + LOG_OVERHEAD + int(block["batch_length"][-1])
            try:
                table = decode(data[a:b], verify_crc=False)
            except KBatchError as exc:
                table = exc.partial if isinstance(exc.partial, RecordTable) else None
                ctx.fail(path, f"{exc.reason} at byte {a + max(exc.position, 0)}",
                         position=a + max(exc.position, 0))
        rows = _Rows(table) if table is not None else None
        if rows is not None and table is not None and ctx.avro is not None and len(table):
            problem, decoded = ctx.avro.decode(table, path)
            if problem is not None:
                ctx.fail(path, problem)
            rows.keys = decoded.get("key", rows.keys)
            rows.values = decoded.get("value", rows.values)
        record_batch = table.records["batch"] if table is not None else np.zeros(0, np.int32)
        bounds = np.searchsorted(record_batch, np.arange(len(block) + 1)).tolist() if table is not None else None
        names = block.dtype.names or ()
        for k, values in enumerate(block.tolist()):  # one conversion per chunk, not one per field
            h = dict(zip(names, values, strict=True))
            _print_batch(data, h, o, path)
            if table is None or rows is None or bounds is None or k >= len(table.batches):
                continue
            batch = _Batch(h, data)
            if batch.is_control:
                control = _Rows(_control_records(data, h, path, ctx))
                span, shown = range(len(control.offset)), control
            else:
                span, shown = range(bounds[k], bounds[k + 1]), rows
            for i in span:
                offset = shown.offset[i]
                if last_offset != -1 and offset != last_offset + 1:
                    ctx.gaps.setdefault(str(path.absolute()), []).append((last_offset, offset))
                last_offset = offset
                _print_record(shown, i, batch, ctx, path)
        o.flush()
    trailing = size - stop
    if err is None and not len(heads) and size and int(args.max_bytes) >= size:
        ctx.fail(path, f"not a Kafka log: no complete batch in its {size} bytes")
        return
    if err is not None:
        ctx.fail(path, f"{err.reason.replace(f' in {path}', '')} at byte {err.position}", position=err.position)
    if trailing > 0 and int(args.max_bytes) == _INT_MAX:
        o.line(f"Found {trailing} invalid bytes at the end of {path.name}", type="invalid_bytes",
               file=str(path), position=stop, length=trailing)


def _control_records(data: memoryview, h: _Head, path: Path, ctx: _Ctx) -> RecordTable:
    """Every record of a control batch (decode keeps only their type): the batch decoded again
    with its control bit cleared, which only the CRC (not checked here) covers."""
    p = int(h["position"])
    raw = bytearray(data[p : p + LOG_OVERHEAD + int(h["batch_length"])])
    raw[_ATTR_CONTROL_BYTE] &= ~0x20
    try:
        return decode(raw, verify_crc=False)
    except KBatchError as exc:
        ctx.fail(path, f"control batch at byte {p}: {exc.reason}", position=p)
        partial = exc.partial
        return partial if isinstance(partial, RecordTable) else decode(b"")


def _print_batch(data: memoryview, h: _Head, o: _Out, path: Path) -> None:
    magic = int(h["magic"])
    ts_name = _TS_TYPES.get(int(h["timestamp_type"]), "NoTimestampType")
    size = LOG_OVERHEAD + int(h["batch_length"])
    valid = _batch_valid(data, h)
    base, last = int(h["base_offset"]), int(h["base_offset"]) + int(h["last_offset_delta"])
    codec = CODEC_NAMES.get(int(h["compression"]), str(int(h["compression"])))
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


class _Batch:
    """What a record's line needs from its batch's header row (read once per batch)."""

    __slots__ = ("compression", "crc", "is_control", "magic", "ts_name", "_data", "_h")

    def __init__(self, h: _Head, data: memoryview) -> None:
        self.magic = int(h["magic"])
        self.ts_name = _TS_TYPES.get(int(h["timestamp_type"]), "NoTimestampType")
        self.compression = int(h["compression"])
        self.crc = int(h["crc"])
        self.is_control = bool(h["is_control"]) and self.magic == 2
        self._h, self._data = h, data

    def valid(self) -> bool:
        return _batch_valid(self._data, self._h)


def _print_record(rows: _Rows, i: int, batch: _Batch, ctx: _Ctx, path: Path) -> None:
    """One record's line, as Kafka's dumpBatchRecords prints it: the metadata (unless
    --skip-record-metadata), a control record's contents, then the key and payload."""
    skip, control, as_json = ctx.args.skip_record_metadata, batch.is_control, ctx.o.json
    offset = rows.offset[i]
    key, value = rows.keys[i], rows.values[i]
    text = ""
    fields: dict[str, Any] = {"type": "control" if control else "record", "offset": offset} if as_json else {}
    if not skip:
        text = (f"| offset: {offset} {batch.ts_name}: {rows.timestamp[i]} keySize: {rows.key_length[i]}"
                f" valueSize: {rows.value_length[i]}")
        if as_json:
            fields.update(timestamp_type=batch.ts_name, timestamp=rows.timestamp[i], key_size=rows.key_length[i],
                          value_size=rows.value_length[i])
        if batch.magic >= 2:
            keys = rows.header_keys(i)
            text += f" sequence: {rows.sequence[i]} headerKeys: [{','.join(keys)}]"
            if as_json:
                fields.update(sequence=rows.sequence[i], header_keys=keys)
        elif batch.compression == 0:
            valid = batch.valid()
            text += f" isValid: {str(valid).lower()} crc: {batch.crc}"
            if as_json:
                fields.update(is_valid=valid, crc=batch.crc)
        if control:
            part, more = _control_text(key, value, offset, path, ctx)
            text += part
            fields.update(more)
    if ctx.print_data and not control:
        prefix = "| " if skip else " "
        try:
            if as_json:
                more, problem = ctx.parser.parse_json(key, value, offset)
                fields.update(more)
            else:
                k, v, problem = ctx.parser.parse(key, value, offset)
                if k is not None:
                    text += f"{prefix}key: {k}"
                    prefix = " "
                if v is not None:
                    text += f"{prefix}payload: {v}"
            if problem is not None:
                ctx.undecoded.setdefault(str(path), []).append((offset, problem))
        except _DecodeError as exc:
            ctx.fail(path, f"offset {offset}: {exc}", offset=offset)
    if control and skip and as_json:
        return
    ctx.o.line(text, **fields)


def _control_text(key: bytes | None, value: bytes | None, offset: int, path: Path,
                  ctx: _Ctx) -> tuple[str, dict[str, Any]]:
    """What Kafka's printControlRecord appends for one control record, and its --json fields.

    Key: ``version int16 (>= 0), type int16`` (ControlRecordType). ABORT/COMMIT values are
    EndTransactionMarker's ``version int16, coordinatorEpoch int32``; the KRaft types' values
    are a message at version 0 whose first field is its ``Version`` (LeaderChangeMessage,
    SnapshotHeaderRecord, ...: :func:`kbatch.cli._dump_internal.control_json`).
    """
    if key is None or len(key) < 4 or struct.unpack_from(">h", key)[0] < 0:
        size = -1 if key is None else len(key)
        ctx.fail(path, f"offset {offset}: control record key is {size} bytes"
                 + ("" if size < 4 else f" with version {struct.unpack_from('>h', key or b'')[0]}")
                 + " (needs 4 bytes, version >= 0)", offset=offset)
        return "", {"control_type": None}
    kind = struct.unpack_from(">h", key, 2)[0]
    name = CONTROL_TYPES.get(kind, "UNKNOWN")
    if kind in (0, 1):
        if value is None or len(value) < 6:
            ctx.fail(path, f"offset {offset}: {name} marker value is {-1 if value is None else len(value)} bytes "
                     "(needs 6: version int16, coordinatorEpoch int32)", offset=offset)
            return f" controlType: {name}({kind})", {"control_type": name}
        epoch = struct.unpack_from(">i", value, 2)[0]
        return (f" endTxnMarker: {name} coordinatorEpoch: {epoch}",
                {"control_type": name, "coordinator_epoch": epoch})
    if kind in _CONTROL_LABELS:
        try:
            shown = control_json(kind, value, offset)
        except (ValueError, KBatchError) as exc:
            ctx.fail(path, f"offset {offset}: {name} control record: {exc}", offset=offset)
            return f" controlType: {name}({kind})", {"control_type": name}
        return f" {_CONTROL_LABELS[kind]}{shown}", {"control_type": name, "control": json.loads(shown)}
    return f" controlType: {name}({kind})", {"control_type": name}


#: How Kafka labels the KRaft control records it decodes (printControlRecord).
_CONTROL_LABELS = {2: "LeaderChange: ", 3: "SnapshotHeader ", 4: "SnapshotFooter ", 5: "KRaftVersion ",
                   6: "KRaftVoters "}


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
    entries = read_index(path, dtype)
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
    rc = 0
    for e in entries:
        offset, position = base + int(e["relative_offset"]), int(e["position"])
        if seg is not None:
            # Kafka reads the first batch of a --max-message-size slice at the entry's position
            window = min(seg.size, position + max(0, int(args.max_message_size)))
            got = scan_headers(seg.data, position, window, 1, seg.path)[0] if position < window else None
            if got is not None and len(got):
                h = got[0]
                found = int(h["base_offset"]) + int(h["last_offset_delta"])
                if found != offset:
                    mismatches.setdefault(str(path.absolute()), []).append((offset, found))
            else:
                o.error(f"kbatch dump: {path}: entry offset {offset} position {position}: no whole batch in the "
                        f"{window - position} bytes there (--max-message-size {int(args.max_message_size)})",
                        file=str(path), offset=offset, position=position)
                rc = 1
        if not args.verify_index_only:
            o.line(f"offset: {offset} position: {position}", type="index_entry", offset=offset, position=position)
    return rc


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
                    t = decode(seg.data[p : p + LOG_OVERHEAD + int(h["batch_length"])], verify_crc=False)
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
    entries = read_index(path, TXN_INDEX_DTYPE)
    assert entries is not None
    for e in entries:
        v, pid, first, last, lso = (int(e[n]) for n in TXN_INDEX_DTYPE.names or ())
        o.line(f"version: {v} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}",
               type="aborted_txn", version=v, producer_id=pid, first_offset=first, last_offset=last,
               last_stable_offset=lso)
    return 0




def _dump_producer_snapshot(path: Path, ctx: _Ctx) -> None:
    """A producer state snapshot (``<offset>.snapshot``, :mod:`kbatch.log._producer_snapshot`), one
    line per producer as Kafka's dumpProducerIdSnapshot prints a ProducerStateEntry."""
    try:
        entries = read_snapshot(path.read_bytes())
    except KBatchError as exc:
        ctx.fail(path, f"not a readable producer snapshot: {exc.reason}", position=exc.position)
        return
    for e in entries.tolist():
        pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first = e
        txn = f"OptionalLong[{txn_first}]" if txn_first >= 0 else "OptionalLong.empty"
        text = (f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coordinator_epoch} "
                f"currentTxnFirstOffset: {txn} lastTimestamp: {ts}")
        fields: dict[str, Any] = {
            "type": "producer", "producer_id": pid, "producer_epoch": epoch, "coordinator_epoch": coordinator_epoch,
            "current_txn_first_offset": txn_first if txn_first >= 0 else None, "last_timestamp": ts,
        }
        if last_offset >= 0:  # Kafka's BatchMetadata, with DefaultRecordBatch.decrementSequence
            first_seq = _int32(_INT_MAX - (delta - last_seq) + 1) if last_seq < delta else last_seq - delta
            text += (f" firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset}"
                     f" offsetDelta: {delta} timestamp: {ts}")
            fields.update(first_sequence=first_seq, last_sequence=last_seq, last_offset=last_offset,
                          offset_delta=delta, timestamp=ts)
        ctx.o.line(text, **fields)


def _file_order(path: Path) -> tuple[int, int, str]:
    digits = re.match(r"\d+", path.name)
    return (int(digits.group(0)) if digits else -1, _SUFFIX_ORDER.get(path.suffix, 9), path.name)


def _expand(name: str, ctx: _Ctx) -> list[Any]:
    """``name`` itself, or for a directory the files in it that dump knows, in offset order (the
    entries it leaves out are listed at the end of the run: one stderr line, or with ``--json``
    one ``"type":"not_dumped"`` line per directory; they leave the exit status as it is). A URL is one remote file
    (:class:`kbatch.storage._location.StoragePath`)."""
    if storage.is_remote(name):
        options = storage.parse_options(getattr(ctx.args, "storage_option", None))
        return [storage.StoragePath(storage.locate(name, storage_options=options))]
    path = Path(name)
    if not path.is_dir():
        return [path]
    known: list[Path] = []
    other: list[Path] = []
    for child in path.iterdir():
        (known if child.is_file() and child.suffix in _SUFFIX_ORDER else other).append(child)
    if other:
        names = sorted(c.name + ("/" if c.is_dir() else "") for c in other)
        ctx.not_dumped[str(path)] = names
    return sorted(known, key=_file_order)


_NOT_DUMPED = "not dumped (not a segment, index or snapshot file)"


def _not_dumped_line(skipped: dict[str, list[str]], shown: int = 3, names_shown: int = 8) -> str:
    """One line for the entries that directory arguments left out: the directory's own line when
    there is one, else how many directories (a few named) and each name with the number of
    directories holding it when not all do (50 ``__consumer_offsets-<n>`` folders: one line).

    >>> _not_dumped_line({"/d/t-0": ["leader-epoch-checkpoint"]})
    'kbatch dump: /d/t-0: not dumped (not a segment, index or snapshot file): leader-epoch-checkpoint'
    >>> _not_dumped_line({f"/d/t-{i}": ["leader-epoch-checkpoint"] + ["x"] * (i == 7) for i in range(10)})
    ... # doctest: +NORMALIZE_WHITESPACE
    'kbatch dump: 10 directories (/d/t-0, /d/t-1, /d/t-2 and 7 more): not dumped (not a segment, index or
    snapshot file): leader-epoch-checkpoint, x (in 1)'
    """
    if len(skipped) == 1:
        ((path, names),) = skipped.items()
        return f"kbatch dump: {path}: {_NOT_DUMPED}: {', '.join(names)}"
    dirs = list(skipped)
    where = ", ".join(dirs[:shown]) + (f" and {len(dirs) - shown} more" if len(dirs) > shown else "")
    held: dict[str, int] = {}
    for names in skipped.values():
        for n in names:
            held[n] = held.get(n, 0) + 1
    listed = [n if k == len(dirs) else f"{n} (in {k})" for n, k in sorted(held.items())]
    what = ", ".join(listed[:names_shown]) + (f" and {len(listed) - names_shown} more" if len(listed) > names_shown
                                             else "")
    return f"kbatch dump: {len(dirs)} directories ({where}): {_NOT_DUMPED}: {what}"


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump the files (or directories) named by ``args.files``; return the exit status (0 ok, 1 a
    file failed)."""
    o = _Out(args, out or sys.stdout, err or sys.stderr)
    ctx = _Ctx(args, o)

    def status(fn: Callable[[Path, _Ctx], None]) -> Callable[[Path], int]:
        def call(p: Path) -> int:
            fn(p, ctx)
            return 0
        return call

    handlers: dict[str, Callable[[Path], int]] = {
        ".log": status(_dump_log),
        ".checkpoint": status(_dump_checkpoint),
        ".snapshot": status(_dump_producer_snapshot),
        ".index": lambda p: _dump_index(p, args, o, ctx.mismatches),
        ".timeindex": lambda p: _dump_timeindex(p, args, o, ctx.problems),
        ".txnindex": lambda p: _dump_txnindex(p, args, o),
    }
    rc = 0
    for name in [f for f in str(args.files).split(",") if f]:
        for path in _expand(name, ctx):
            o.line(f"Dumping {path}", type="file", file=str(path), format_version=FORMAT_VERSION)
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
    o.flush()
    for name, pairs in ctx.mismatches.items():  # as Kafka: absolute paths, the last entry first
        o.error(f"Mismatches in :{name}" + "".join(f"\n  Index offset: {a}, log offset: {b}" for a, b in pairs[::-1]),
                file=name)
    for problem in ctx.problems:
        o.error(problem)
    for name, failed in ctx.undecoded.items():
        first, why = failed[0]
        o.error(f"kbatch dump: {name}: {len(failed)} record(s) could not be decoded, the first at offset {first}: "
                f"{why}", file=name, count=len(failed), offset=first)
        rc = 1
    for name, pairs in ctx.gaps.items():
        o.error(f"Non-consecutive offsets in {name}" + "".join(f"\n  {a} is followed by {b}" for a, b in pairs),
                file=name)
    if ctx.not_dumped and o.json:  # one line per directory: machines get every name; not an error
        for where, names in ctx.not_dumped.items():
            o.line("", type="not_dumped", message=f"kbatch dump: {where}: {_NOT_DUMPED}: {', '.join(names)}",
                   file=where, skipped=names)
    elif ctx.not_dumped:
        o.error(_not_dumped_line(ctx.not_dumped))
    o.flush()
    return max(rc, ctx.rc)


def main(argv: list[str] | None = None) -> int:
    """``python -m kbatch.cli._dump ...``: the same as ``kbatch dump ...``."""
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
