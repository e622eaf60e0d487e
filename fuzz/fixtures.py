"""Valid inputs the harnesses start from: a partition directory, sample buffers and messages.

Everything here is deterministic (fixed timestamps, topic id), so seeds made by
``fuzz/make_seeds.py`` and the directory ``fuzz/fuzz_logdir.py`` builds at start-up agree.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import kbatch
from kbatch.log import LogWriter

__all__ = [
    "CODECS",
    "FAMILY_ORDER",
    "KRAFT_CHECKPOINT_OFFSET",
    "PARTITION",
    "TOPIC_ID",
    "edit_copies",
    "internal_records",
    "parse_record_list",
    "partition_dir",
    "record_list",
    "record_buffers",
    "sample_message",
    "side_files",
    "side_root",
]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITION = "fz-0"
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
_PID = 7


def _batch(values: list[bytes | None], base: int, ts: int, **kw: Any) -> bytes:
    return kbatch.encode(values, keys=[b"k%d" % (base + i) for i in range(len(values))],
                         timestamps=[ts + 10 * i for i in range(len(values))],
                         headers=[[("h", b"%d" % i)] for i in range(len(values))], base_offset=base, **kw)


def partition_dir(root: str | Path) -> Path:
    """Write a small partition ``fz-0`` under ``root`` and return its path.

    Two segments; uncompressed and compressed batches; a committed and an aborted
    transaction (so ``.txnindex`` has an entry); an index entry per batch; timestamps that
    rise, except one batch that goes back in time.
    """
    with LogWriter(root, "fz", 0, segment_bytes=700, index_interval_bytes=1, topic_id=TOPIC_ID) as w:
        off = 0
        for i, codec in enumerate(("none", "gzip", "none", "zstd", "lz4", "snappy")):
            w.append(_batch([b"v%d" % (off + j) for j in range(3)], off, 1000 + 100 * i, compression=codec))
            off += 3
        w.append(_batch([b"late", None], off, 900))  # a timestamp going back
        off += 2
        w.append(_batch([b"t1", b"t2"], off, 2000, producer_id=_PID, producer_epoch=0, transactional=True))
        off += 2
        w.append(kbatch.encode_control("commit", _PID, 0, base_offset=off, timestamp=2050))
        off += 1
        w.append(_batch([b"a1", b"a2"], off, 2100, producer_id=_PID, producer_epoch=0, base_sequence=2,
                        transactional=True))
        off += 2
        w.append(kbatch.encode_control("abort", _PID, 0, base_offset=off, timestamp=2150))
        off += 1
        w.append(_batch([b"end%d" % j for j in range(4)], off, 2200, max_batch_records=2))
    return Path(root) / PARTITION


def record_buffers() -> dict[str, bytes]:
    """Named valid ``kbatch.decode`` inputs: every codec and magic, control batches, transactions."""
    out: dict[str, bytes] = {}
    for codec in CODECS:
        out[f"v2-{codec}"] = _batch([b"value", None, b"x" * 300], 0, 1000, compression=codec, max_batch_records=2)
        if codec != "zstd":
            for magic in (0, 1):
                out[f"v{magic}-{codec}"] = kbatch.encode([b"old", None, b"y" * 100], keys=[b"k", None, b"k2"],
                                                         timestamps=[5, 6, 7], magic=magic,
                                                         compression=None if codec == "none" else codec)
    out["control"] = (kbatch.encode_control("commit", 1, 0, base_offset=0)
                      + kbatch.encode_control("abort", 2, 3, base_offset=1, coordinator_epoch=4))
    out["txn"] = (
        _batch([b"a", b"b"], 0, 10, producer_id=_PID, producer_epoch=0, transactional=True)
        + _batch([b"c"], 2, 20, producer_id=8, producer_epoch=0, transactional=True, compression="zstd")
        + kbatch.encode_control("abort", _PID, 0, base_offset=3)
        + _batch([b"d"], 4, 30)
        + kbatch.encode_control("commit", 8, 0, base_offset=5)
    )
    out["log-append"] = _batch([b"p", b"q"], 40, 50, timestamp_type="log_append", partition_leader_epoch=3)
    out["empty-values"] = kbatch.encode([b"", b""], keys=[b"", None], timestamps=[0, -1])
    return out


def _value(f: Any, version: int, i: int) -> Any:
    kind = f.kind
    if kind == "struct":
        return {g.key: _sample_field(g, version, i) for g in f.fields or () if g.present(version)}
    if kind == "bool":
        return True
    if kind in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return i + 1
    if kind == "float64":
        return 1.5
    if kind == "string":
        return f"s{i}"
    if kind == "bytes":
        return b"b%d" % i
    if kind == "records":
        return kbatch.encode([b"r%d" % i], timestamps=[1])
    if kind == "uuid":
        return uuid.UUID(int=i + 1)
    return f.default(version)


def _sample_field(f: Any, version: int, i: int) -> Any:
    if f.array:
        return [_value(f, version, i + j) for j in range(2)]
    return _value(f, version, i)


def sample_message(msg: Any, version: int) -> dict[str, Any]:
    """A message of ``version`` with every field set (arrays of two), or its defaults if that fails."""
    sample = {f.key: _sample_field(f, version, 0) for f in msg.spec.fields if f.present(version)}
    try:
        msg.encode(sample, version)
    except kbatch.KBatchError:
        return msg.default(version)
    return sample


#: the end offset of the fixture's KRaft ``.checkpoint`` (the log after it starts there)
KRAFT_CHECKPOINT_OFFSET = 3


def _metadata(record_type: str, version: int = 0, **fields: Any) -> bytes:
    from kbatch.internal import encode_key_value

    _, v = encode_key_value("metadata", record_type, None, fields, version=version)
    assert v is not None
    return v


def side_root(root: str | Path) -> Path:
    """Write a ``log.dirs`` root with every kind of side file under ``root``; return the root.

    ``fz-0`` (``LogWriter``: ``partition.metadata``, ``leader-epoch-checkpoint``, a producer
    ``.snapshot`` per roll with a producer in a transaction, the root's offset checkpoints
    and an empty ``cleaner-offset-checkpoint`` entry); ``__cluster_metadata-0`` with a KRaft
    ``.checkpoint`` (topic, partition, broker, feature) ending at
    :data:`KRAFT_CHECKPOINT_OFFSET` and the log after it (a partition change, a config).
    """
    from kbatch.log._checkpoint import CLEANER, update_checkpoint

    root = Path(root)
    with LogWriter(root, "fz", 0, segment_bytes=300, topic_id=TOPIC_ID) as w:
        w.append(_batch([b"a", b"b"], 0, 1000, producer_id=_PID, producer_epoch=1, base_sequence=0))
        w.append(_batch([b"c" * 200], 2, 1100))
        w.append(_batch([b"t"], 3, 1200, producer_id=_PID + 1, producer_epoch=0, transactional=True))
    update_checkpoint(root / CLEANER, {("fz", 0): 1})
    t = uuid.UUID(int=1)
    image = [_metadata("TopicRecord", name="fz", topic_id=t),
             _metadata("PartitionRecord", partition_id=0, topic_id=t, replicas=[1, 2], isr=[1], leader=1,
                       leader_epoch=2, partition_epoch=3),
             _metadata("FeatureLevelRecord", name="metadata.version", feature_level=20)]
    part = root / "__cluster_metadata-0"
    part.mkdir()
    name = f"{KRAFT_CHECKPOINT_OFFSET:020d}-{1:010d}.checkpoint"
    (part / name).write_bytes(kbatch.encode(image, timestamps=[1] * len(image)))
    log = [_metadata("PartitionChangeRecord", partition_id=0, topic_id=t, leader=2, isr=[1, 2]),
           _metadata("ConfigRecord", resource_type=2, resource_name="fz", name="retention.ms", value="1")]
    with LogWriter(root, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode(log, base_offset=KRAFT_CHECKPOINT_OFFSET, timestamps=[2] * len(log)))
    for f in part.glob("*.snapshot"):
        f.unlink()
    return root


def side_files(root: Path) -> list[Path]:
    """The side files of :func:`side_root`, in the order of ``fuzz_sidefiles``' selector byte."""
    from kbatch.log._checkpoint import CHECKPOINT_FILES

    part = root / PARTITION
    return [*(root / name for name in CHECKPOINT_FILES), part / "partition.metadata",
            part / "leader-epoch-checkpoint", sorted(part.glob("*.snapshot"))[-1],
            next((root / "__cluster_metadata-0").glob("*.checkpoint"))]


def internal_records() -> dict[str, tuple[str, list[tuple[bytes | None, bytes | None]]]]:
    """Valid records of every internal family, by name: ``(family, [(key, value), ...])``.

    Every coordinator record type at every value version (and its tombstone), every metadata
    and remote-log record at every version, each with every field set where the definitions
    allow it (:func:`sample_message`); plus a few records that make sense together (offset
    commits of one group, a topic with a partition and a change to it).
    """
    from kbatch.internal import default_registry, encode_key_value

    reg = default_registry()
    out: dict[str, tuple[str, list[tuple[bytes | None, bytes | None]]]] = {}
    for family, types in sorted(reg.coordinator.items()):
        for rtype, (kmsg, kversion, vmsg) in sorted(types.items()):
            key = sample_message(kmsg, kversion)
            for version in vmsg.versions:
                try:
                    pair = encode_key_value(family, kmsg.name, key, sample_message(vmsg, version), version=version)
                    tomb = encode_key_value(family, kmsg.name, key, None)
                except (kbatch.KBatchError, KeyError, TypeError, ValueError):
                    continue
                out[f"{family}-{rtype}-{kmsg.name}-v{version}"] = (family, [pair, tomb])
    for family, msgs in sorted(reg.metadata.items()):
        for api_key, msg in sorted(msgs.items()):
            for version in msg.versions:
                try:
                    pair = encode_key_value(family, msg.name, None, sample_message(msg, version), version=version)
                except (kbatch.KBatchError, KeyError, TypeError, ValueError):
                    continue
                out[f"{family}-{api_key}-{msg.name}-v{version}"] = (family, [pair])
    commits = []
    for i, version in enumerate((0, 1, 3, 4, 4)):
        commits.append(encode_key_value(
            "group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": i % 3},
            {"offset": i, "leader_epoch": 1, "metadata": "m" * (130 if i == 4 else i), "commit_timestamp": 5,
             "expire_timestamp": 9}, version=version))
    out["group-commits"] = ("group", commits)
    t = uuid.UUID(int=1)
    out["metadata-image"] = ("metadata", [
        (None, _metadata("TopicRecord", name="a", topic_id=t)),
        (None, _metadata("PartitionRecord", partition_id=0, topic_id=t, replicas=[1], isr=[1], leader=1,
                         leader_epoch=2**31 - 1, partition_epoch=0)),
        (None, _metadata("PartitionChangeRecord", partition_id=0, topic_id=t, leader=2)),
        (None, _metadata("ClearElrRecord", topic_name="a")),
        (None, _metadata("RemoveTopicRecord", topic_id=t)),
    ])
    return out


#: the families of ``fuzz_internal``'s flags bits 4-6
FAMILY_ORDER = ("group", "transaction", "share", "metadata", "remote_log")


def record_list(pairs: list[tuple[bytes | None, bytes | None]]) -> bytes:
    """``pairs`` as ``fuzz_internal``'s record list: uint16 length (0xFFFF null) and bytes, key then value."""
    out = bytearray()
    for pair in pairs:
        for part in pair:
            out += b"\xff\xff" if part is None else len(part).to_bytes(2, "big") + part
    return bytes(out)


def parse_record_list(body: bytes) -> tuple[list[bytes | None], list[bytes | None]]:
    """The (keys, values) of a record list (:func:`record_list`); a cut record ends it."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    pos = 0
    while True:
        parts: list[bytes | None] = []
        for _ in range(2):
            if pos + 2 > len(body):
                return keys, values
            n = int.from_bytes(body[pos:pos + 2], "big")
            pos += 2
            if n == 0xFFFF:
                parts.append(None)
                continue
            if pos + n > len(body):
                return keys, values
            parts.append(body[pos:pos + n])
            pos += n
        keys.append(parts[0])
        values.append(parts[1])


def edit_copies(bodies: list[bytes], edits: bytes) -> list[bytes]:
    """Copies of ``bodies`` changed by ``edits``, 3 bytes each: ``a b v``, position
    ``((a & 0x3F) << 8 | b)`` (body ``position % n``, byte ``position // n`` in it), ``a >> 6``:
    0, 1 set the byte to ``v``; 2 insert ``v``; 3 cut the body there. Only the copies that
    changed are returned."""
    out = [bytearray(b) for b in bodies]
    n = len(bodies)
    for k in range(0, len(edits) - 2, 3):
        a, b, v = edits[k], edits[k + 1], edits[k + 2]
        where = (a & 0x3F) << 8 | b
        body = out[where % n]
        at = (where // n) % (len(body) + 1)
        op = a >> 6
        if op < 2 and at < len(body):
            body[at] = v
        elif op == 2:
            body.insert(at, v)
        elif op == 3:
            del body[at:]
    return [bytes(m) for m, b in zip(out, bodies, strict=True) if m != b]
