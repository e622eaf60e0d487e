"""Protocol codec benchmarks: kbatch.protocol vs kafka-python's protocol layer vs kio.

Run (short, one core is enough)::

    python -m pytest bench/test_bench_protocol.py --benchmark-only \\
        --benchmark-columns=min,median,ops --benchmark-sort=name -p no:randomly

Workloads (the same bytes for every peer, checked before timing):

* ``fetch-decode``: a FetchResponse v17, 5 topics x 10 partitions, 64 KiB of
  record batches per partition (3.2 MiB). kbatch hands ``records`` out as
  zero-copy views; kafka-python copies them to ``bytes``; kio (native reader)
  copies them too.
* ``fetch-encode``: the same message encoded; kbatch both to one ``bytes``
  (``encode``) and to a list of buffers for ``socket.sendmsg``
  (``encode_parts``, records not copied). ``copy floor`` is one
  ``b"".join`` of ready-made parts: the single copy of the 3.7 MB message
  that any encoder producing one ``bytes`` must make, so
  kafka-python / floor is the best ratio ``encode`` can reach.
* ``metadata-decode``: a MetadataResponse v12 with 10 brokers and 1,000
  partitions (20 topics x 50), 3 replicas each.

Caveat: kbatch's messages are dicts, kafka-python's and kio's are objects;
each peer is measured doing its own natural thing with the same bytes.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from kbatch.protocol import Records, default_schema

kafka_fetch = pytest.importorskip("kafka.protocol.consumer.fetch")
kafka_metadata = pytest.importorskip("kafka.protocol.metadata.metadata")
try:
    from kio.schema.fetch.v17.response import FetchResponse as KioFetchResponse
    from kio.schema.metadata.v12.response import MetadataResponse as KioMetadataResponse
    from kio.serial import entity_reader, entity_writer
except ImportError:  # pragma: no cover
    KioFetchResponse = None

SCHEMA = default_schema()
FETCH = SCHEMA.response("Fetch")
METADATA = SCHEMA.response("Metadata")
FETCH_V = 17
META_V = 12


def _records(size: int, seed: int) -> bytes:
    """Real record batches, about ``size`` bytes."""
    out = bytearray()
    while len(out) < size:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(50):
            b.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=bytes([seed % 251]) * 200,
                     headers=[])
        out += b.build()
    return bytes(out)


def fetch_message() -> dict[str, Any]:
    topics = []
    for t in range(5):
        parts = []
        for p in range(10):
            parts.append({
                "partition_index": p, "error_code": 0, "high_watermark": 1_000_000 + p,
                "last_stable_offset": 1_000_000 + p, "log_start_offset": 0,
                "aborted_transactions": None, "preferred_read_replica": -1,
                "records": _records(64 * 1024, t * 10 + p),
            })
        topics.append({"topic_id": uuid.UUID(int=(t + 1) * 0x1234567890ABCDEF), "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": topics}


def metadata_message() -> dict[str, Any]:
    brokers = [{"node_id": i, "host": f"broker-{i}.kafka.example.com", "port": 9092, "rack": f"rack-{i % 3}"}
               for i in range(10)]
    topics = []
    for t in range(20):
        parts = [{"error_code": 0, "partition_index": p, "leader_id": p % 10, "leader_epoch": 7,
                  "replica_nodes": [p % 10, (p + 1) % 10, (p + 2) % 10],
                  "isr_nodes": [p % 10, (p + 1) % 10, (p + 2) % 10], "offline_replicas": []}
                 for p in range(50)]
        topics.append({"error_code": 0, "name": f"topic-{t:03d}", "topic_id": uuid.UUID(int=t + 1),
                       "is_internal": False, "partitions": parts, "topic_authorized_operations": -2147483648})
    return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": "bench-cluster", "controller_id": 1,
            "topics": topics}


FETCH_MSG = fetch_message()
FETCH_BYTES = FETCH.encode(FETCH_MSG, FETCH_V)
META_MSG = metadata_message()
META_BYTES = METADATA.encode(META_MSG, META_V)
KP_FETCH = kafka_fetch.FetchResponse
KP_META = kafka_metadata.MetadataResponse


def test_peers_agree() -> None:
    """The peers read the benchmark bytes, and kafka-python writes the same bytes."""
    ours = FETCH.decode(FETCH_BYTES, FETCH_V)
    theirs = KP_FETCH.decode(FETCH_BYTES, version=FETCH_V)
    assert len(FETCH_BYTES) > 50 * 64 * 1024
    for t_ours, t_theirs in zip(ours["responses"], theirs.responses, strict=True):
        for p_ours, p_theirs in zip(t_ours["partitions"], t_theirs.partitions, strict=True):
            assert isinstance(p_ours["records"], Records)
            assert p_ours["records"] == p_theirs.records
    theirs._header = None
    assert bytes(theirs.encode(version=FETCH_V)) == FETCH_BYTES
    meta = KP_META.decode(META_BYTES, version=META_V)
    assert sum(len(t.partitions) for t in meta.topics) == 1000
    meta._header = None
    assert bytes(meta.encode(version=META_V)) == META_BYTES
    if KioFetchResponse is not None:
        kio_fetch, size = entity_reader(KioFetchResponse)(memoryview(FETCH_BYTES), 0)
        assert size == len(FETCH_BYTES)
        first = ours["responses"][0]["partitions"][0]["records"]
        assert bytes(kio_fetch.responses[0].partitions[0].records) == bytes(first)
        kio_meta, size = entity_reader(KioMetadataResponse)(memoryview(META_BYTES), 0)
        assert size == len(META_BYTES)
        assert sum(len(t.partitions) for t in kio_meta.topics) == 1000


# ------------------------------------------------------------------ Fetch decode


@pytest.mark.benchmark(group="fetch-decode")
def test_fetch_decode_kbatch(benchmark: Any) -> None:
    out = benchmark(FETCH.decode, FETCH_BYTES, FETCH_V)
    assert len(out["responses"]) == 5


@pytest.mark.benchmark(group="fetch-decode")
def test_fetch_decode_kafka_python(benchmark: Any) -> None:
    out = benchmark(KP_FETCH.decode, FETCH_BYTES, version=FETCH_V)
    assert len(out.responses) == 5


@pytest.mark.benchmark(group="fetch-decode")
@pytest.mark.skipif(KioFetchResponse is None, reason="kio not installed")
def test_fetch_decode_kio(benchmark: Any) -> None:
    reader = entity_reader(KioFetchResponse)
    view = memoryview(FETCH_BYTES)
    out, _ = benchmark(reader, view, 0)
    assert len(out.responses) == 5


# ------------------------------------------------------------------ Fetch encode


@pytest.mark.benchmark(group="fetch-encode")
def test_fetch_encode_kbatch_bytes(benchmark: Any) -> None:
    out = benchmark(FETCH.encode, FETCH_MSG, FETCH_V)
    assert out == FETCH_BYTES


@pytest.mark.benchmark(group="fetch-encode")
def test_fetch_encode_kbatch_parts(benchmark: Any) -> None:
    parts = benchmark(FETCH.encode_parts, FETCH_MSG, FETCH_V)
    assert sum(memoryview(p).nbytes for p in parts) == len(FETCH_BYTES)


@pytest.mark.benchmark(group="fetch-encode")
def test_fetch_encode_copy_floor(benchmark: Any) -> None:
    parts = FETCH.encode_parts(FETCH_MSG, FETCH_V)
    assert benchmark(b"".join, parts) == FETCH_BYTES


@pytest.mark.benchmark(group="fetch-encode")
def test_fetch_encode_kafka_python(benchmark: Any) -> None:
    obj = KP_FETCH.decode(FETCH_BYTES, version=FETCH_V)
    obj._header = None  # decoded objects lack it; encode() reads it
    out = benchmark(obj.encode, version=FETCH_V)
    assert len(out) == len(FETCH_BYTES)


@pytest.mark.benchmark(group="fetch-encode")
@pytest.mark.skipif(KioFetchResponse is None, reason="kio not installed")
def test_fetch_encode_kio(benchmark: Any) -> None:
    obj, _ = entity_reader(KioFetchResponse)(memoryview(FETCH_BYTES), 0)
    writer = entity_writer(KioFetchResponse)

    def encode() -> bytes:
        buf = io.BytesIO()
        writer(buf, obj)
        return buf.getvalue()

    assert len(benchmark(encode)) == len(FETCH_BYTES)


# ------------------------------------------------------------------ Metadata decode


@pytest.mark.benchmark(group="metadata-decode")
def test_metadata_decode_kbatch(benchmark: Any) -> None:
    out = benchmark(METADATA.decode, META_BYTES, META_V)
    assert len(out["topics"]) == 20


@pytest.mark.benchmark(group="metadata-decode")
def test_metadata_decode_kafka_python(benchmark: Any) -> None:
    out = benchmark(KP_META.decode, META_BYTES, version=META_V)
    assert len(out.topics) == 20


@pytest.mark.benchmark(group="metadata-decode")
@pytest.mark.skipif(KioFetchResponse is None, reason="kio not installed")
def test_metadata_decode_kio(benchmark: Any) -> None:
    reader = entity_reader(KioMetadataResponse)
    view = memoryview(META_BYTES)
    out, _ = benchmark(reader, view, 0)
    assert len(out.topics) == 20


def timed_cases() -> dict[str, Any]:
    """The cases of :func:`interleaved_ratios`, by name: functions of no arguments."""
    kio_fetch = entity_reader(KioFetchResponse) if KioFetchResponse is not None else None
    kio_meta = entity_reader(KioMetadataResponse) if KioFetchResponse is not None else None
    kp_fetch_obj = KP_FETCH.decode(FETCH_BYTES, version=FETCH_V)
    kp_fetch_obj._header = None
    view_f, view_m = memoryview(FETCH_BYTES), memoryview(META_BYTES)
    fetch_parts = FETCH.encode_parts(FETCH_MSG, FETCH_V)
    cases: dict[str, Any] = {
        "fetch-decode kbatch": lambda: FETCH.decode(FETCH_BYTES, FETCH_V),
        "fetch-decode kafka-python": lambda: KP_FETCH.decode(FETCH_BYTES, version=FETCH_V),
        "fetch-encode kbatch (bytes)": lambda: FETCH.encode(FETCH_MSG, FETCH_V),
        "fetch-encode kbatch (parts)": lambda: FETCH.encode_parts(FETCH_MSG, FETCH_V),
        "fetch-encode copy floor": lambda: b"".join(fetch_parts),
        "fetch-encode kafka-python": lambda: kp_fetch_obj.encode(version=FETCH_V),
        "metadata-decode kbatch": lambda: METADATA.decode(META_BYTES, META_V),
        "metadata-decode kafka-python": lambda: KP_META.decode(META_BYTES, version=META_V),
    }
    if kio_fetch is not None and kio_meta is not None:
        cases["fetch-decode kio"] = lambda: kio_fetch(view_f, 0)
        cases["metadata-decode kio"] = lambda: kio_meta(view_m, 0)
    return cases


def interleaved_ratios(rounds: int = 30) -> dict[str, tuple[float, float]]:
    """Times (median, best in us) and ratios peer / kbatch, measured alternately.

    Each round runs every case (5 calls) in a new random order: a fixed order
    would always run the same case after the one that flushes the caches
    (kafka-python's decode copies 3.7 MB), a systematic bias of up to ~30%
    for the memory-bound ``encode``. ``python bench/test_bench_protocol.py``
    prints them.
    """
    import random
    import statistics
    import time

    cases = timed_cases()
    times: dict[str, list[float]] = {k: [] for k in cases}
    order = list(cases.items())
    shuffle = random.Random(7).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name, fn in order:
            t0 = time.perf_counter()
            for _ in range(5):
                fn()
            times[name].append((time.perf_counter() - t0) / 5)
    out: dict[str, tuple[float, float]] = {
        k: (statistics.median(v) * 1e6, min(v) * 1e6) for k, v in times.items()}
    ratios = [(f"{group} {peer}", ours) for peer in ("kafka-python", "kio")
              for group, ours in (("fetch-decode", "fetch-decode kbatch"),
                                  ("metadata-decode", "metadata-decode kbatch"),
                                  ("fetch-encode", "fetch-encode kbatch (bytes)"))]
    ratios += [("fetch-encode kafka-python", "fetch-encode kbatch (parts)"),
               ("fetch-encode kafka-python", "fetch-encode copy floor")]
    for peer, ours in ratios:
        if peer in out:
            name = f"ratio {peer}/{ours.split(' ', 1)[1]}"
            out[name] = (out[peer][0] / out[ours][0], out[peer][1] / out[ours][1])
    return out


if __name__ == "__main__":
    import os

    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'':58s} {'median':>9s} {'best':>9s}")
    for name, (median, best) in interleaved_ratios().items():
        unit = "x" if name.startswith("ratio") else " us"
        print(f"{name:58s} {median:8.1f}{unit} {best:8.1f}{unit}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
