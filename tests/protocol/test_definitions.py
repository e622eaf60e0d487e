"""kbatch's own definition files against the ones Kafka ships (bundled by kafka-python)."""

from __future__ import annotations

import pytest
from support.protocol_defs import KAFKA_PYTHON_DEFINITIONS, OWN_APIS, semantic

from kbatch.protocol import Schema, default_schema, parse_message


@pytest.mark.parametrize("name", [f"{a}{t}" for a in OWN_APIS for t in ("Request", "Response")])
def test_own_definition_matches_kafka_field_for_field(name: str) -> None:
    ours = default_schema()[name].spec
    theirs = parse_message((KAFKA_PYTHON_DEFINITIONS / f"{name}.json").read_text())
    assert (ours.api_key, ours.type, str(ours.valid), str(ours.flexible)) == (
        theirs.api_key, theirs.type, str(theirs.valid), str(theirs.flexible))
    assert semantic(ours.fields) == semantic(theirs.fields)


def test_default_schema_has_every_api() -> None:
    schema = default_schema()
    assert len(schema) == 2 * len(OWN_APIS)
    assert schema.request("Produce").max_version == 13
    assert schema.response("Fetch").max_version == 18
    assert schema.api_keys == [0, 1, 2, 3, 10, 18, 22, 24, 26]


def test_every_kafka_definition_loads_and_compiles() -> None:
    schema = Schema.from_directory(KAFKA_PYTHON_DEFINITIONS)
    assert len(schema) >= 100
    compiled = 0
    for msg in schema:
        if msg.type not in ("request", "response"):
            continue
        for v in msg.versions:
            msg.decoder(v)
            msg.encoder(v)
            compiled += 1
    assert compiled > 400


def test_kafka_header_definitions_match_the_framing() -> None:
    """Kafka's RequestHeader/ResponseHeader definitions, compiled, give the bytes the framing writes.

    RequestHeader's ClientId has ``"flexibleVersions": "none"``: a field-level
    override that keeps it an int16-length string even in header v2.
    """
    from kbatch.protocol import encode_request, encode_response

    kafka = Schema.from_directory(KAFKA_PYTHON_DEFINITIONS)
    own = default_schema()
    header = {"request_api_key": 1, "request_api_version": 12, "correlation_id": 7, "client_id": "cli"}
    v2 = kafka["RequestHeader"].encode(header, 2)
    assert v2 == b"\x00\x01\x00\x0c\x00\x00\x00\x07\x00\x03cli\x00"
    assert encode_request(own, "Fetch", 12, {}, correlation_id=7, client_id="cli", framed=False).startswith(v2)
    v1 = kafka["RequestHeader"].encode(dict(header, request_api_version=11), 1)
    assert encode_request(own, "Fetch", 11, {}, correlation_id=7, client_id="cli", framed=False).startswith(v1)
    assert kafka["RequestHeader"].decode(v2, 2) == header
    r1 = kafka["ResponseHeader"].encode({"correlation_id": 9}, 1)
    assert encode_response(own, "Fetch", 12, {}, correlation_id=9, framed=False).startswith(r1)
    assert r1 == b"\x00\x00\x00\x09\x00"
