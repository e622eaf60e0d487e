"""Random ``log.dirs`` roots of registry-framed typed values, for the property tests of the typed
lazy scans (``tests/log/test_scan_properties.py``).

:func:`write_random_root` writes, from one seed, a root holding the registry's ``_schemas`` topic
(subject ``t-value``, schema id 1) and topic ``t`` over 1-3 partitions of several small segments:
batches of 1-6 records in every codec, timestamps rising from :data:`BASE_TS` with the records
out of order inside a batch, a transaction aborted now and then (``read_committed`` differs), and
among the good values (Confluent framing: magic 0, the id as a big-endian int32, the body) bad
ones (an unknown schema id, a body cut short, no magic byte, nothing) and tombstones.

The values' language is the caller's: ``"avro"`` (a random record schema of
:mod:`support.avro_random`, nested, with nulls and unions; bodies written by fastavro),
``"protobuf"`` (a random ``.proto`` of :mod:`support.proto_gen`, its most nested message first so
that it is the one a registry reader lays the values out by; messages built by protobuf) or
``"json"`` (a random JSON Schema object of :func:`random_json_schema`, values drawn to fit it).
"""

from __future__ import annotations

import json
import random
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kbatch
from support import schemas_topic

from .avro_random import all_names, encode, random_schema, random_value

TOPIC = "t"
BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
LANGUAGES = ("avro", "protobuf", "json")


@dataclass
class RandomRoot:
    """What :func:`write_random_root` wrote."""

    root: Path
    language: str
    schema: str  #: the schema text of id 1 (subject ``t-value``)
    partitions: int
    last_ts: int  #: the greatest timestamp written (ms)
    records: int


def framed(schema_id: int, body: bytes) -> bytes:
    """Confluent's frame: 0x00, the id as a big-endian int32, the body."""
    return b"\x00" + struct.pack(">i", schema_id) + body


# ---------------------------------------------------------------- JSON Schema

def random_json_schema(rng: random.Random, depth: int = 3) -> dict[str, Any]:
    """A random JSON Schema object: 1-5 properties of integers, numbers, strings (some dates),
    booleans, nullable types, arrays, maps (``additionalProperties``) and objects, nested
    ``depth`` levels, some of them ``required`` at every level: objects holding maps or held by
    them, with optional properties left out, and optional objects left out whose own properties
    are required (shapes that DuckDB's strict JSON transform and ``pyarrow.json`` refused)."""
    props = {f"p{i}": _json_type(rng, depth - 1) for i in range(rng.randint(1, 5))}
    out: dict[str, Any] = {"type": "object", "properties": props}
    required = [k for k in props if rng.random() < 0.3]
    if required:
        out["required"] = required
    return out


def _json_type(rng: random.Random, depth: int) -> dict[str, Any]:
    r = rng.random()
    if depth <= 0 or r < 0.5:
        kind = rng.choice(["integer", "number", "string", "boolean", "date", "nullable"])
        if kind == "date":
            return {"type": "string", "format": "date"}
        if kind == "nullable":
            return {"type": [rng.choice(["integer", "string", "number"]), "null"]}
        return {"type": kind}
    if r < 0.7:
        return {"type": "array", "items": _json_type(rng, depth - 1)}
    if r < 0.8:
        return {"type": "object", "additionalProperties": _json_type(rng, depth - 1)}
    return random_json_schema(rng, depth)


def random_json_value(rng: random.Random, schema: dict[str, Any]) -> Any:
    """A value of ``schema`` (:func:`random_json_schema`): optional properties absent or null now and then."""
    if "properties" in schema:
        required = set(schema.get("required", ()))
        out = {}
        for k, t in schema["properties"].items():
            r = rng.random()
            if k in required or r < 0.7:
                out[k] = random_json_value(rng, t)
            elif r < 0.85:
                out[k] = None
        return out
    if schema["type"] == "object":
        return {f"k{i}": random_json_value(rng, schema["additionalProperties"]) for i in range(rng.randint(0, 3))}
    if schema["type"] == "array":
        return [random_json_value(rng, schema["items"]) for _ in range(rng.randint(0, 3))]
    if schema.get("format") == "date":
        return f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    kind = schema["type"]
    if isinstance(kind, list):
        if rng.random() < 0.3:
            return None
        kind = kind[0]
    if kind == "integer":
        return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-1000, 1000)])
    if kind == "number":
        return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)])
    if kind == "string":
        return "".join(rng.choice("aZ09 é€😀\"\\") for _ in range(rng.randint(0, 6)))
    return rng.random() < 0.5


# ---------------------------------------------------------------- the languages

class _Values:
    """Random good value bodies of one language (framed by the caller) and the schema's text."""

    language: str
    text: str

    def body(self, rng: random.Random) -> bytes:
        raise NotImplementedError


class _Avro(_Values):
    language = "avro"

    def __init__(self, rng: random.Random) -> None:
        self.schema = random_schema(rng, rng.randint(1, 3))
        self.names = all_names(self.schema)
        self.text = json.dumps(self.schema)

    def body(self, rng: random.Random) -> bytes:
        return encode(self.schema, random_value(rng, self.schema, self.names))


class _Json(_Values):
    language = "json"

    def __init__(self, rng: random.Random) -> None:
        self.schema = random_json_schema(rng)
        self.text = json.dumps(self.schema)

    def body(self, rng: random.Random) -> bytes:
        return json.dumps(random_json_value(rng, self.schema)).encode()


class _Protobuf(_Values):
    language = "protobuf"

    def __init__(self, rng: random.Random, work: Path) -> None:
        from .proto_gen import message_classes, random_proto_rng

        text, self.spec = random_proto_rng(rng, "gen")
        self.root = len(self.spec) - 1
        # the root (the last message: it may use the others) first, as the one a reader lays out
        blocks = re.findall(r"message M\d+ \{.*?\n\}", text, flags=re.S)
        head = text[: text.index(blocks[0])]
        self.text = head + "\n".join([blocks[-1], *blocks[:-1]]) + "\n"
        work.mkdir(parents=True, exist_ok=True)
        self.classes = message_classes(work, self.text)

    def body(self, rng: random.Random) -> bytes:
        from .proto_gen import random_message

        # message indexes [0] (the first message), written as the one byte 0
        return b"\x00" + random_message(rng, self.spec, self.classes, self.root).SerializeToString()


def _value(rng: random.Random, values: _Values) -> bytes | None:
    """A good framed value mostly; a tombstone or a bad value now and then."""
    r = rng.random()
    if r < 0.05:
        return None
    body = values.body(rng)
    if r < 0.08:
        return framed(99, body)  # an unknown schema id
    if r < 0.11:
        return framed(1, body[: len(body) // 2])  # cut short (it may still decode: the eager read says)
    if r < 0.13:
        return rng.choice([b"", b"\x01", body])  # no frame
    return framed(1, body)


def write_random_root(base: Path, seed: int, language: str) -> RandomRoot:
    """The root described in the module's docstring, under ``base`` (created), from ``seed``."""
    rng = random.Random(seed)
    base.mkdir(parents=True, exist_ok=True)
    values: _Values
    if language == "avro":
        values = _Avro(rng)
    elif language == "json":
        values = _Json(rng)
    else:
        values = _Protobuf(rng, base / "proto")
    root = base / "root"
    schema_type = {"avro": None, "json": "JSON", "protobuf": "PROTOBUF"}[language]
    schemas_topic.write_topic(root, [schemas_topic.schema(f"{TOPIC}-value", 1, 1, values.text,
                                                          schema_type=schema_type)])
    partitions = rng.randint(1, 3)
    last = BASE_TS
    records = 0
    for partition in range(partitions):
        ts = BASE_TS
        offset = 0
        with kbatch.LogWriter(root, TOPIC, partition, segment_bytes=rng.randint(300, 1500),
                              index_interval_bytes=100) as w:
            for _ in range(rng.randint(2, 12)):
                n = rng.randint(1, 6)
                ts += rng.choice([0, 1, 5, 20])
                stamps = [ts - rng.randint(0, 10) for _ in range(n)]
                stamps[rng.randrange(n)] = ts
                txn: dict[str, Any] = {}
                aborted = rng.random() < 0.15
                if aborted:
                    txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
                offset = w.append(kbatch.encode([_value(rng, values) for _ in range(n)],
                                                keys=[b"k%d" % (offset + i) for i in range(n)], timestamps=stamps,
                                                base_offset=offset, compression=rng.choice(CODECS), **txn))
                if aborted:
                    offset = w.append(kbatch.encode_control("abort", 7, 0, base_offset=offset, timestamp=ts))
                records += n
        last = max(last, ts)
    return RandomRoot(root, language, values.text, partitions, last, records)
