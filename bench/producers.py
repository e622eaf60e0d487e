"""The core workload as each producer kbatch can reach here writes it: the codec bench's producer axis.

Each producer has its own flavour of every codec's framing, and a decoder tuned on one can
stall on another; so the codec bench decodes the same records as written by:

``kbatch``
    ``kbatch.encode`` at Kafka's producer default levels (gzip 6, snappy, lz4 9 = the fast
    compressor, zstd 3): one gzip member, xerial snappy in 32 KiB chunks, LZ4 frames FLG
    0x60, zstd frames that declare their content size.
``aiokafka``
    aiokafka's Cython ``DefaultRecordBatchBuilder`` at its own defaults: gzip 9, LZ4 HC 9
    through cramjam with block checksums (FLG 0x70), zstd 3 with a content size.
``kafka-python``
    kafka-python's ``DefaultRecordBatchBuilder``: python-lz4 frames with a content size
    (FLG 0x68), xerial snappy, gzip, zstd.
``librdkafka``
    ``confluent_kafka.Producer`` into librdkafka's in-process mock cluster
    (``tests/support/kafka_mock.py``, loopback only), 500 records per batch, fetched back
    raw: raw snappy blocks (no xerial framing), librdkafka's LZ4 frames, zstd from its
    streaming compressor. Skipped when confluent-kafka is not installed.
``java``
    The layouts Apache Kafka's Java producer writes, synthesized here (no Kafka jar on
    this machine) with the codec libraries from kbatch's uncompressed batches, header
    and CRC-32C rewritten: LZ4 frames FLG 0x60 BD 0x40 of 64 KiB blocks (lz4-java's fast
    compressor, as ``Lz4BlockOutputStream`` at the default level), zstd frames without a
    content size (zstd-jni's streaming ``ZstdOutputStream``), xerial snappy in 32 KiB
    chunks (``SnappyOutputStream``), and gzip of several members (16 KiB each: the
    multi-member layout ``GZIPInputStream`` reads on through).

Every producer writes the same 200,000 records (``workload.core_workload``) in batches of
500; a producer's bytes are built once per process.
"""

from __future__ import annotations

import functools
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import crc32c
import lz4.block
import snappy
import xxhash
import zstandard
from workload import BATCH_RECORDS, core_workload

import kbatch

__all__ = ["CODEC_IDS", "PRODUCERS", "available", "batches"]

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

#: Records per mock-cluster topic (librdkafka producer); see _librdkafka.
_RDK_TOPIC_RECORDS = 25_000

Workload = tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]


def _kbatch(codec: str, w: Workload) -> bytes:
    values, keys, timestamps, headers = w
    return kbatch.encode(
        values, keys, timestamps=timestamps, headers=headers, max_batch_records=BATCH_RECORDS,
        compression=None if codec == "none" else codec,
    )  # fmt: skip


def _builder_batches(builder: Callable[..., object], codec: str, w: Workload) -> bytes:
    values, keys, timestamps, headers = w
    out = []
    for first in range(0, len(values), BATCH_RECORDS):
        b = builder(
            magic=2, compression_type=CODEC_IDS[codec], is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=2**30,
        )  # fmt: skip
        for i in range(first, min(first + BATCH_RECORDS, len(values))):
            b.append(i - first, timestamp=timestamps[i], key=keys[i], value=values[i], headers=headers[i])  # type: ignore[attr-defined]
        out.append(bytes(b.build()))  # type: ignore[attr-defined]
    return _with_offsets(out)


def _with_offsets(batches: list[bytes]) -> bytes:
    """Batches one after the other with base offsets running on (as a log or a Fetch has them)."""
    out = bytearray()
    offset = 0
    for b in batches:
        out += offset.to_bytes(8, "big") + b[8:]
        offset += int.from_bytes(b[23:27], "big") + 1  # last offset delta
    return bytes(out)


def _aiokafka(codec: str, w: Workload) -> bytes:
    from aiokafka.record._crecords import DefaultRecordBatchBuilder

    return _builder_batches(DefaultRecordBatchBuilder, codec, w)


def _kafka_python(codec: str, w: Workload) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return _builder_batches(DefaultRecordBatchBuilder, codec, w)


def _librdkafka(codec: str, w: Workload) -> bytes:
    import confluent_kafka

    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    from support.kafka_mock import fetch_all, mock_cluster

    values, keys, timestamps, headers = w
    out = []
    errors: list[object] = []
    with mock_cluster() as cluster:
        # The mock keeps about 5 MB per partition (older segments are dropped): a topic
        # per _RDK_TOPIC_RECORDS records, fetched back in order.
        for first in range(0, len(values), _RDK_TOPIC_RECORDS):
            topic = f"bench-{codec}-{first}"
            cluster.create_topic(topic)
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": cluster.bootstrap,
                    "compression.type": codec,
                    "batch.num.messages": BATCH_RECORDS,
                    "linger.ms": 1000,
                    "queue.buffering.max.messages": 2 * _RDK_TOPIC_RECORDS,
                    "queue.buffering.max.kbytes": 1 << 21,
                    "enable.idempotence": False,
                    "message.timeout.ms": 60000,
                    "log_level": 3,
                }
            )
            for i in range(first, min(first + _RDK_TOPIC_RECORDS, len(values))):
                producer.produce(
                    topic, values[i], key=keys[i], partition=0, timestamp=timestamps[i], headers=headers[i],
                    on_delivery=lambda err, _msg: err is not None and errors.append(err),
                )  # fmt: skip
            left = producer.flush(60)
            if left or errors:
                raise RuntimeError(f"librdkafka produce failed: {left} undelivered, {errors[:3]}")
            out.append(fetch_all(cluster.bootstrap, topic))
    return _with_offsets(_split(b"".join(out)))


def _split(data: bytes) -> list[bytes]:
    """Batches of a buffer, one by one."""
    out = []
    pos = 0
    while pos < len(data):
        end = pos + 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
        out.append(data[pos:end])
        pos = end
    return out


def _lz4_java(records: memoryview) -> bytes:
    """Lz4BlockOutputStream: FLG 0x60 (independent blocks, no checksums), BD 0x40 (64 KiB)."""
    descriptor = bytes((0x60, 0x40))
    out = [b"\x04\x22\x4d\x18", descriptor, bytes(((xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF,))]
    for i in range(0, len(records), 65536):
        block = records[i : i + 65536]
        c = lz4.block.compress(block, store_size=False)
        if len(c) >= len(block):
            out += [(len(block) | 0x80000000).to_bytes(4, "little"), bytes(block)]
        else:
            out += [len(c).to_bytes(4, "little"), c]
    out.append(b"\0\0\0\0")
    return b"".join(out)


def _zstd_java(records: memoryview) -> bytes:
    """zstd-jni's ZstdOutputStream: a streamed frame, no content size."""
    c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return c.compress(records) + c.flush()


def _snappy_java(records: memoryview) -> bytes:
    """SnappyOutputStream: the xerial header, then 32 KiB chunks each with its length."""
    out = [b"\x82SNAPPY\x00", (1).to_bytes(4, "big"), (1).to_bytes(4, "big")]
    for i in range(0, len(records), 32768):
        c = snappy.compress(bytes(records[i : i + 32768]))
        out += [len(c).to_bytes(4, "big"), c]
    return b"".join(out)


def _gzip_members(records: memoryview) -> bytes:
    """gzip at level 6 in members of 16 KiB: a stream GZIPInputStream reads on through."""
    out = []
    for i in range(0, len(records), 16384):
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        out.append(c.compress(records[i : i + 16384]) + c.flush())
    return b"".join(out)


_JAVA = {"gzip": _gzip_members, "snappy": _snappy_java, "lz4": _lz4_java, "zstd": _zstd_java}


def _java(codec: str, w: Workload) -> bytes:
    plain = _kbatch("none", w)
    if codec == "none":
        return plain
    b = kbatch.decode(plain).batches
    mv = memoryview(plain)
    out = []
    for pos, length in zip(b["position"].tolist(), b["batch_length"].tolist(), strict=True):
        head = bytearray(mv[pos : pos + 61])
        payload = _JAVA[codec](mv[pos + 61 : pos + 12 + length])
        head[8:12] = (49 + len(payload)).to_bytes(4, "big")
        head[21:23] = (int.from_bytes(head[21:23], "big") | CODEC_IDS[codec]).to_bytes(2, "big")
        crc = crc32c.crc32c(payload, crc32c.crc32c(bytes(head[21:])))
        head[17:21] = crc.to_bytes(4, "big")
        out.append(bytes(head) + payload)
    return b"".join(out)


PRODUCERS: dict[str, Callable[[str, Workload], bytes]] = {
    "kbatch": _kbatch,
    "aiokafka": _aiokafka,
    "kafka-python": _kafka_python,
    "librdkafka": _librdkafka,
    "java": _java,
}


def available(producer: str) -> bool:
    """Whether ``producer`` runs here (librdkafka needs confluent-kafka)."""
    if producer != "librdkafka":
        return True
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def batches(producer: str, codec: str, n_records: int) -> bytes:
    """The first ``n_records`` of the core workload as ``producer`` writes them with ``codec``.

    Checked: kbatch decodes them (CRC-32C verified) to exactly the workload's records.
    """
    w = core_workload(n_records)
    data = PRODUCERS[producer](codec, w)
    t = kbatch.decode(data)
    values, keys, timestamps, _ = w
    assert len(t) == n_records, (producer, codec, len(t))
    assert t.value(0) == values[0] and t.value(n_records - 1) == values[-1]
    assert t.key(n_records // 2) == keys[n_records // 2]
    assert t.records["timestamp"].tolist() == timestamps
    compression = t.batches["compression"]
    assert (compression == CODEC_IDS[codec]).all() or (producer == "librdkafka" and (compression != 0).any()), (
        producer, codec, set(compression.tolist()),
    )  # fmt: skip
    return data
