"""librdkafka's in-process mock cluster, for tests that need a real Kafka peer.

``confluent_kafka`` starts the mock cluster inside this process
(``test.mock.num.brokers``); its brokers listen on 127.0.0.1 only. Every
operation here has a bounded timeout.

Usage::

    from support.kafka_mock import fetch_raw, mock_cluster

    with mock_cluster() as cluster:
        cluster.produce("t", [b"a", b"b"], compression="zstd")
        raw = fetch_raw(cluster.bootstrap, "t", 0, 0)      # bytes of record batches
        rows = cluster.consume("t", count=2)               # what librdkafka reads

Known mock quirks (librdkafka 2.x): control batches are written with CRC 0;
aborted data is not filtered and aborted transactions are not reported;
one Fetch returns at most one batch per partition; flexible Metadata
responses (v9+) carry one stray trailing byte (so :func:`metadata` decodes
them with ``strict=False``); an unsupported ApiVersions version is answered
with a body that is not v0 (``Connection.negotiate`` then falls back to v0);
ProduceResponse v5 lacks LogStartOffset.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from kbatch.protocol import Connection, ProtocolError, decode_response

__all__ = [
    "CODECS",
    "MockCluster",
    "fetch_all",
    "fetch_raw",
    "fetch_response",
    "mock_cluster",
    "topic_id",
]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TIMEOUT = 10.0


@dataclass
class Consumed:
    """One record as a ``confluent_kafka.Consumer`` returned it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp: int


class MockCluster:
    """A running mock cluster; use :func:`mock_cluster` to get one."""

    def __init__(self, owner: confluent_kafka.Producer, bootstrap: str) -> None:
        self._owner = owner
        self.bootstrap = bootstrap

    def connection(self, **kwargs: Any) -> Connection:
        """A :class:`kbatch.protocol.Connection` to the (first) broker."""
        kwargs.setdefault("timeout", TIMEOUT)
        return Connection.from_bootstrap(self.bootstrap, **kwargs)

    def create_topic(self, topic: str) -> uuid.UUID:
        """Create a topic (the mock auto-creates it with 4 partitions); return its id.

        The mock does not implement CreateTopics; a Metadata request that
        allows auto-creation makes it.
        """
        deadline = time.monotonic() + TIMEOUT
        with self.connection() as conn:
            while True:
                meta = metadata(conn, topic, auto_create=True)
                t = meta["topics"][0]
                if t["error_code"] == 0 and t["partitions"]:
                    return t["topic_id"]  # type: ignore[no-any-return]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topic {topic!r} not created: error {t['error_code']}")
                time.sleep(0.05)

    def produce(self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                *, partition: int = 0, compression: str = "none",
                headers: Sequence[list[tuple[str, bytes]] | None] | None = None,
                timestamps: Sequence[int] | None = None, linger_ms: int = 5) -> None:
        """Produce records through a ``confluent_kafka.Producer`` and wait for all acks."""
        producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap,
            "compression.type": compression,
            "linger.ms": linger_ms,
            "enable.idempotence": False,
            "message.timeout.ms": int(TIMEOUT * 1000),
        })
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        for i, value in enumerate(values):
            kwargs: dict[str, Any] = {"partition": partition, "on_delivery": on_delivery}
            if keys is not None:
                kwargs["key"] = keys[i]
            if headers is not None and headers[i] is not None:
                kwargs["headers"] = headers[i]
            if timestamps is not None:
                kwargs["timestamp"] = timestamps[i]
            producer.produce(topic, value, **kwargs)
        left = producer.flush(TIMEOUT)
        if left or errors:
            raise RuntimeError(f"produce failed: {left} undelivered, errors {errors[:3]}")

    def consume(self, topic: str, *, count: int, partition: int = 0, offset: int = 0,
                isolation_level: str = "read_uncommitted", timeout: float = TIMEOUT) -> list[Consumed]:
        """Read ``count`` records with a ``confluent_kafka.Consumer`` (``check.crcs=true``)."""
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"kbatch-test-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "check.crcs": True,
            "isolation.level": isolation_level,
            "enable.partition.eof": True,
        })
        out: list[Consumed] = []
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"consume failed: {err}")
                out.append(Consumed(msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
        finally:
            consumer.close()
        return out


@contextmanager
def mock_cluster(num_brokers: int = 1) -> Iterator[MockCluster]:
    """Start librdkafka's mock cluster; yield it; stop it on exit."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": num_brokers, "log_level": 3})
    try:
        md = owner.list_topics(timeout=TIMEOUT)
        brokers = sorted(md.brokers.values(), key=lambda b: b.id)
        for b in brokers:
            if b.host != "127.0.0.1":
                raise RuntimeError(f"mock broker on {b.host}, expected loopback")
        yield MockCluster(owner, ",".join(f"{b.host}:{b.port}" for b in brokers))
    finally:
        owner.flush(1.0)
        del owner


def metadata(conn: Connection, topic: str, *, auto_create: bool = False) -> dict[str, Any]:
    """A Metadata response for one topic.

    The mock appends one stray byte to every flexible Metadata response, so
    this one response is decoded with ``strict=False``.
    """
    version = min(12, conn.version("Metadata"))
    correlation_id, version = conn.send(
        "Metadata", {"topics": [{"name": topic}], "allow_auto_topic_creation": auto_create}, version)
    got, body = decode_response(conn.schema, "Metadata", version, conn.receive_raw(), strict=False)
    assert got == correlation_id
    return body


def topic_id(conn: Connection, topic: str) -> uuid.UUID:
    """The topic id, from a Metadata v12 request."""
    meta = metadata(conn, topic)
    for t in meta["topics"]:
        if t["name"] == topic:
            if t["error_code"]:
                raise ProtocolError(f"Metadata error {t['error_code']} for topic {topic!r}")
            return t["topic_id"]  # type: ignore[no-any-return]
    raise ProtocolError(f"topic {topic!r} not in Metadata response")


def fetch_response(conn: Connection, topic: str, partition: int, offset: int, *,
                   version: int | None = None, max_bytes: int = 64 << 20,
                   isolation_level: int = 0) -> dict[str, Any]:
    """Send one Fetch with kbatch's codec and return the decoded response (checked for errors)."""
    if version is None:
        version = conn.version("Fetch")
    fetch_topic: dict[str, Any] = {"partitions": [{
        "partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes,
        "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1,
    }]}
    if version >= 13:
        fetch_topic["topic_id"] = topic_id(conn, topic)
    else:
        fetch_topic["topic"] = topic
    request = {
        "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": max_bytes,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [fetch_topic], "forgotten_topics_data": [], "rack_id": "",
    }
    response = conn.request("Fetch", request, version=version)
    if response.get("error_code", 0):
        raise ProtocolError(f"Fetch error {response['error_code']}")
    part = response["responses"][0]["partitions"][0]
    if part["error_code"]:
        raise ProtocolError(f"Fetch error {part['error_code']} for {topic}[{partition}]")
    return response


def fetch_raw(bootstrap: str, topic: str, partition: int, offset: int, *,
              version: int | None = None, isolation_level: int = 0) -> bytes:
    """The raw ``records`` bytes of one Fetch response (possibly empty)."""
    with Connection.from_bootstrap(bootstrap, timeout=TIMEOUT) as conn:
        response = fetch_response(conn, topic, partition, offset, version=version,
                                  isolation_level=isolation_level)
    records = response["responses"][0]["partitions"][0]["records"]
    return b"" if records is None else bytes(records)


def _next_offset(raw: bytes) -> tuple[int, int]:
    """Offset after the last whole batch in ``raw``, and where that batch ends."""
    pos, nxt = 0, -1
    while pos + 61 <= len(raw):
        base = int.from_bytes(raw[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(raw[pos + 8:pos + 12], "big", signed=True)
        last_delta = int.from_bytes(raw[pos + 23:pos + 27], "big", signed=True)
        if pos + 12 + length > len(raw):
            break
        nxt = base + last_delta + 1
        pos += 12 + length
    return nxt, pos


def fetch_all(bootstrap: str, topic: str, partition: int = 0, offset: int = 0, *,
              version: int | None = None, isolation_level: int = 0) -> bytes:
    """Fetch repeatedly (the mock returns one batch per Fetch) up to the high watermark."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    with Connection.from_bootstrap(bootstrap, timeout=TIMEOUT) as conn:
        while time.monotonic() < deadline:
            response = fetch_response(conn, topic, partition, offset, version=version,
                                      isolation_level=isolation_level)
            part = response["responses"][0]["partitions"][0]
            raw = b"" if part["records"] is None else bytes(part["records"])
            nxt, end = _next_offset(raw)
            if nxt > offset:
                chunks.append(raw[:end])
                offset = nxt
            if offset >= part["high_watermark"]:
                break
    return b"".join(chunks)
