"""Batches written by librdkafka, decoded by kbatch (issue 4's librdkafka bullet).

confluent-kafka's in-process mock cluster (:mod:`kafka_mock`, loopback only, bounded
timeouts) stores what a ``confluent_kafka.Producer`` sends; the raw partition bytes come
back through a raw-socket Fetch and must decode to exactly what was produced: offsets,
timestamps, keys, values, headers, and the producer fields. librdkafka writes its own
flavours of the codecs (raw snappy rather than xerial, zstd frames from its streaming
compressor, its own LZ4 frames), so this is where they meet kbatch's readers.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import kbatch

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_mock = pytest.importorskip("support.kafka_mock")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {name: i for i, name in enumerate(CODECS)}
TIMEOUT = 10.0
BASE_TS = 1_700_000_000_000

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with kafka_mock.mock_cluster() as c:
        yield c


def _topic(cluster: Any, name: str) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic)
    return topic


def _text(rng: random.Random, n: int) -> bytes:
    # Text-like, so that librdkafka's compression pays and it does not fall back to none.
    words = [b'{"user":', b'"event":"click"', b"1700000000", b", ", b"}", b"value", b"\xc3\xa9\x00"]
    return b"".join(rng.choices(words, k=n // 4 + 1))[:n]


def sample(seed: int, n: int):
    """Values, keys, headers and timestamps of many shapes: null key/value, empty, large, headers."""
    rng = random.Random(seed)
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    timestamps: list[int] = []
    for i in range(n):
        shape = rng.random()
        values.append(
            None
            if shape < 0.05
            else _text(rng, 300_000)
            if shape > 0.98
            else _text(rng, rng.choice([0, 1, 60, 130, 2000]))
        )
        keys.append(None if rng.random() < 0.2 else b"key-%d" % rng.randrange(1000))
        hs: list[tuple[str, bytes | None]] = [
            (
                rng.choice(["trace", "tenant", "ünïcode"]),
                None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 12)),
            )
            for _ in range(rng.choice([0, 1, 1, 2, 5]))
        ]
        headers.append(hs)
        # mostly increasing, sometimes earlier than the previous record (CreateTime is the producer's)
        timestamps.append(BASE_TS + 3 * i + rng.choice([0, 0, 0, -1000, 17]))
    return values, keys, headers, timestamps


def kbatch_rows(t: kbatch.RecordTable) -> list[Row]:
    return [
        (
            int(t.records["offset"][i]),
            int(t.records["timestamp"][i]),
            t.key(i),
            t.value(i),
            t.headers(i),
        )
        for i in range(len(t))
    ]


def _check_table(t: kbatch.RecordTable, raw: bytes, codec: str, n: int) -> None:
    assert not t.truncated and t.consumed_bytes == len(raw) and t.next_offset == n
    b = t.batches
    assert set(b["magic"].tolist()) == {2}
    assert set(b["timestamp_type"].tolist()) == {0}
    assert not b["is_control"].any() and not b["is_transactional"].any()
    # librdkafka sends a batch uncompressed when compressing it does not pay
    assert set(b["compression"].tolist()) <= {0, CODEC_ID[codec]}
    if codec != "none":
        assert (b["compression"] == CODEC_ID[codec]).any(), "no batch was compressed at all"
    # offsets: batches back to back, records contiguous inside them
    assert b["base_offset"].tolist() == [int(x) for x in t.records["offset"][b["first_record"]]]
    assert (b["base_offset"] + b["last_offset_delta"] + 1).tolist()[:-1] == b["base_offset"].tolist()[1:]
    for row in b:
        first = int(row["first_record"])
        ts = t.records["timestamp"][first : first + int(row["record_count"])]
        assert row["max_timestamp"] == ts.max()


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_decode_exactly(cluster: Any, codec: str) -> None:
    n = 400
    values, keys, headers, timestamps = sample(CODEC_ID[codec], n)
    topic = _topic(cluster, f"rdk-{codec}")
    cluster.produce(topic, values, keys, compression=codec, headers=headers, timestamps=timestamps)
    raw = kafka_mock.fetch_all(cluster.bootstrap, topic)
    t = kbatch.decode(raw)  # CRC-32C verified
    assert kbatch_rows(t) == [(i, timestamps[i], keys[i], values[i], headers[i]) for i in range(n)]
    _check_table(t, raw, codec, n)
    assert len(t.batches) > 1  # several batches, so positions and arenas are exercised
    assert (t.batches["producer_id"] == -1).all() and (t.records["sequence"] == -1).all()


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_reads_the_same(cluster: Any, codec: str) -> None:
    """kbatch and librdkafka's own consumer (check.crcs=true) agree on the same partition."""
    n = 120
    values, keys, headers, timestamps = sample(100 + CODEC_ID[codec], n)
    topic = _topic(cluster, f"rdk-consume-{codec}")
    cluster.produce(topic, values, keys, compression=codec, headers=headers, timestamps=timestamps)
    consumed = cluster.consume(topic, count=n)
    t = kbatch.decode(kafka_mock.fetch_all(cluster.bootstrap, topic))
    assert kbatch_rows(t) == [(c.offset, c.timestamp, c.key, c.value, c.headers or []) for c in consumed]


def _produce_idempotent(bootstrap: str, topic: str, codec: str, values: list[bytes], rounds: int) -> None:
    """``rounds`` flushes from one idempotent producer: one producer id, sequences running on."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int(TIMEOUT * 1000),
        }
    )
    errors: list[Any] = []
    for r in range(rounds):
        for i, v in enumerate(values):
            producer.produce(
                topic, v, key=b"k", partition=0, timestamp=BASE_TS + r * 1000 + i,
                on_delivery=lambda err, _msg: err is not None and errors.append(err),
            )  # fmt: skip
        assert producer.flush(TIMEOUT) == 0
    assert not errors, errors[:3]


@pytest.mark.parametrize("codec", ["none", "zstd", "snappy"])
def test_idempotent_producer_fields(cluster: Any, codec: str) -> None:
    values = [b"value %d " % i * 8 for i in range(50)]
    topic = _topic(cluster, f"rdk-idem-{codec}")
    _produce_idempotent(cluster.bootstrap, topic, codec, values, rounds=3)
    raw = kafka_mock.fetch_all(cluster.bootstrap, topic)
    t = kbatch.decode(raw)
    n = 3 * len(values)
    assert [t.value(i) for i in range(len(t))] == values * 3
    assert t.records["offset"].tolist() == list(range(n))
    assert t.records["timestamp"].tolist() == [BASE_TS + r * 1000 + i for r in range(3) for i in range(len(values))]
    _check_table(t, raw, codec, n)
    b = t.batches
    assert len(set(b["producer_id"].tolist())) == 1 and b["producer_id"][0] >= 0
    assert (b["producer_epoch"] >= 0).all()
    # one producer, one partition, no retries: sequence == offset
    assert b["base_sequence"].tolist() == b["base_offset"].tolist()
    assert t.records["sequence"].tolist() == list(range(n))


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_truncated_fetch_tail(cluster: Any, codec: str) -> None:
    """A Fetch response cut inside a librdkafka batch: the whole batches decode, the tail waits."""
    values, keys, headers, timestamps = sample(7, 200)
    topic = _topic(cluster, f"rdk-tail-{codec}")
    for part in (slice(0, 120), slice(120, 200)):  # two flushes: at least two batches
        cluster.produce(
            topic, values[part], keys[part], compression=codec, headers=headers[part], timestamps=timestamps[part]
        )
    raw = kafka_mock.fetch_all(cluster.bootstrap, topic)
    whole = kbatch.decode(raw)
    assert len(whole.batches) >= 2
    last = int(whole.batches["position"][-1])
    cut = kbatch.decode(raw[: last + (len(raw) - last) // 2])
    assert cut.truncated and cut.consumed_bytes == last
    assert len(cut) == int(whole.batches["first_record"][-1])
    assert kbatch_rows(cut) == kbatch_rows(whole)[: len(cut)]
    assert cut.next_offset == int(whole.batches["base_offset"][-1])


def test_transactional_batches_and_mock_control_crc(cluster: Any) -> None:
    """A committed transaction: data batches flagged transactional, then a COMMIT marker.

    The mock writes its control batches with CRC 0 (a known quirk, see ``kafka_mock``):
    strict decoding rejects that batch, naming it; ``verify_crc=False`` reads it.
    """
    topic = _topic(cluster, "rdk-txn")
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": f"kbatch-{uuid.uuid4().hex[:8]}",
            "compression.type": "zstd",
            "linger.ms": 5,
            "message.timeout.ms": int(TIMEOUT * 1000),
            "transaction.timeout.ms": int(TIMEOUT * 1000),
        }
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, b"txn value %d" % i, key=b"k", partition=0, timestamp=BASE_TS + i)
    producer.commit_transaction(TIMEOUT)

    deadline = time.monotonic() + TIMEOUT
    raw = b""
    while time.monotonic() < deadline:  # the marker is written after the commit returns
        raw = kafka_mock.fetch_all(cluster.bootstrap, topic)
        if kbatch.decode(raw, verify_crc=False).batches["is_control"].any():
            break
        time.sleep(0.05)
    t = kbatch.decode(raw, verify_crc=False)
    data = ~t.batches["is_control"]
    assert t.batches["is_transactional"].all()
    assert (t.batches["compression"][data] == CODEC_ID["zstd"]).all()
    ctrl = t.batches[t.batches["is_control"]]
    assert len(ctrl) == 1 and ctrl["control_type"][0] == 1  # COMMIT
    pid = t.batches["producer_id"]
    assert len(set(pid.tolist())) == 1 and pid[0] >= 0
    data_records = ~t.batches["is_control"][t.records["batch"]]
    assert [t.value(i) for i in range(len(t)) if data_records[i]] == [b"txn value %d" % i for i in range(30)]
    assert t.next_offset == 31

    if int(ctrl["crc"][0]) == 0:  # the mock's quirk; a real broker writes a good CRC
        with pytest.raises(kbatch.CRCError) as err:
            kbatch.decode(raw)
        assert err.value.batch_index == int(np.flatnonzero(t.batches["is_control"])[0])
        assert len(err.value.partial) == 30


def test_librdkafka_codec_flavours_are_covered(cluster: Any) -> None:
    """What the tests above exercise: librdkafka's raw snappy (no xerial header) and zstd
    frames without a content size (its streaming compressor); LZ4 frames of independent
    blocks. If librdkafka changes flavour, this says the coverage changed with it."""
    firsts = {}
    for codec in ("snappy", "zstd", "lz4"):
        topic = _topic(cluster, f"rdk-flavour-{codec}")
        cluster.produce(topic, [b"hello world %d " % i * 10 for i in range(300)], compression=codec)
        raw = kafka_mock.fetch_all(cluster.bootstrap, topic)
        t = kbatch.decode(raw)
        assert [t.value(i) for i in range(len(t))] == [b"hello world %d " % i * 10 for i in range(300)]
        pos = int(t.batches["position"][0])
        firsts[codec] = raw[pos + 61 : pos + 61 + 6]
    assert not firsts["snappy"].startswith(b"\x82SNAPPY")  # raw snappy
    assert firsts["zstd"][:4] == b"\x28\xb5\x2f\xfd" and firsts["zstd"][4] & 0xE0 == 0  # no content size
    assert firsts["lz4"][:4] == b"\x04\x22\x4d\x18" and firsts["lz4"][4] & 0x20  # independent blocks
