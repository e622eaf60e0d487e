"""Tier 2: round trips with independent Kafka implementations from PyPI.

Batches built by aiokafka's and kafka-python's own builders decode to the same
fields with kbatch; batches built by kbatch decode to the same records with
theirs (their CRC checks included).
"""

from __future__ import annotations

import random

import pytest

import kbatch

aiokafka_records = pytest.importorskip("aiokafka.record._crecords")
kafka_default = pytest.importorskip("kafka.record.default_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {name: i for i, name in enumerate(CODECS)}


def _text(rng: random.Random, n: int) -> bytes:
    # Text-like bytes, so that every codec really compresses (peers fall back to
    # no compression when it does not pay).
    words = [b'"user":', b'"event":', b'"click"', b"1700000", b", ", b"{", b"}", b"value", b"\x00\xff"]
    out = b"".join(rng.choices(words, k=n // 4 + 1))
    return out[:n]


def random_records(seed: int, n: int):
    """Many shapes: null/empty/large values, many headers, negative timestamp deltas."""
    rng = random.Random(seed)
    base_ts = 1_700_000_000_000
    recs = []
    for _i in range(n):
        shape = rng.random()
        value = None if shape < 0.1 else b"" if shape < 0.2 else _text(rng, rng.choice([1, 50, 130, 3000]))
        if shape > 0.97:
            value = _text(rng, 200_000)
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 16))
        nh = rng.choice([0, 0, 1, 2, 40])
        headers = [(f"h{j}-{rng.randint(0, 99)}", None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 20)))
                   for j in range(nh)]
        recs.append((key, value, base_ts + rng.randint(-5000, 5000), headers))
    return recs


PRODUCERS = [
    pytest.param({"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False}, id="plain"),
    pytest.param({"producer_id": 1234, "producer_epoch": 7, "base_sequence": 100, "transactional": False},
                 id="idempotent"),
    pytest.param({"producer_id": 99, "producer_epoch": 0, "base_sequence": 0, "transactional": True},
                 id="transactional"),
]


def _peer_build(lib: str, codec: str, recs, p) -> bytes:
    mod = aiokafka_records if lib == "aiokafka" else kafka_default
    b = mod.DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_ID[codec], is_transactional=int(p["transactional"]),
        producer_id=p["producer_id"], producer_epoch=p["producer_epoch"], base_sequence=p["base_sequence"],
        batch_size=2**30,
    )
    for i, (key, value, ts, headers) in enumerate(recs):
        assert b.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(b.build())


def _peer_read(lib: str, data: bytes):
    """(offset, timestamp, key, value, headers) per record, with the peer's CRC check."""
    records = aiokafka_records.MemoryRecords(data) if lib == "aiokafka" else kafka_memory.MemoryRecords(data)
    out, batches = [], 0
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc()
        batches += 1
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    return out, batches


@pytest.mark.parametrize("lib", ["aiokafka", "kafka-python"])
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("seed", [1, 2])
def test_peer_built_batches_decode(lib, codec, producer, seed):
    recs = random_records(seed, 60)
    data = _peer_build(lib, codec, recs, producer)
    t = kbatch.decode(data)
    assert len(t) == len(recs)
    b = t.batches[0]
    assert b["compression"] == CODEC_ID[codec]
    assert (b["producer_id"], b["producer_epoch"], b["base_sequence"]) == (
        producer["producer_id"], producer["producer_epoch"], producer["base_sequence"])
    assert bool(b["is_transactional"]) == producer["transactional"]
    assert b["max_timestamp"] == max(r[2] for r in recs)
    for i, (key, value, ts, headers) in enumerate(recs):
        assert t.records["offset"][i] == i
        assert t.records["timestamp"][i] == ts
        assert t.key(i) == key and t.value(i) == value
        assert t.headers(i) == headers
        expected_seq = -1 if producer["base_sequence"] < 0 else producer["base_sequence"] + i
        assert t.records["sequence"][i] == expected_seq


@pytest.mark.parametrize("lib", ["aiokafka", "kafka-python"])
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("seed", [3, 4])
def test_kbatch_built_batches_decode_with_peers(lib, codec, seed):
    recs = random_records(seed, 80)
    data = kbatch.encode(
        [r[1] for r in recs], [r[0] for r in recs], timestamps=[r[2] for r in recs],
        headers=[r[3] for r in recs], base_offset=1000, max_batch_records=25, compression=codec,
        producer_id=5, producer_epoch=1, base_sequence=0,
    )
    got, batches = _peer_read(lib, data)
    assert batches == 4
    assert got == [(1000 + i, ts, key, value, headers) for i, (key, value, ts, headers) in enumerate(recs)]


@pytest.mark.parametrize("lib", ["aiokafka", "kafka-python"])
def test_kbatch_builder_output_decodes_with_peers(lib):
    b = kbatch.BatchBuilder(base_offset=3, compression="lz4")
    for i in range(10):
        b.append(b"v%d" % i, key=b"k", timestamp=50 - i, headers=[("n", b"%d" % i)])
    got, _ = _peer_read(lib, b.build())
    assert got == [(3 + i, 50 - i, b"k", b"v%d" % i, [("n", b"%d" % i)]) for i in range(10)]
