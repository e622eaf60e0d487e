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

__all__ = ["CODECS", "PARTITION", "TOPIC_ID", "partition_dir", "record_buffers", "sample_message"]

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
