"""Strings that are not UTF-8 are ProtocolErrors with a path and a byte, wherever they are."""

from __future__ import annotations

import pytest

from kbatch.protocol import Message, ProtocolError, decode_request, default_schema, encode_request


def test_request_header_client_id_not_utf8() -> None:
    # ApiVersions v0 (api 18), correlation id 1, client id of 2 bytes: ff fe
    data = bytes.fromhex("00120000000000010002fffe")
    with pytest.raises(ProtocolError, match=r"Invalid UTF-8.* - at header\.client_id \(byte 10\)") as info:
        decode_request(default_schema(), data)
    assert info.value.position == 10 and info.value.path == "header.client_id"
    framed = len(data).to_bytes(4, "big") + data
    with pytest.raises(ProtocolError, match=r"at header\.client_id \(byte 14\)"):
        decode_request(default_schema(), framed, framed=True)


def test_request_header_client_id_utf8() -> None:
    data = encode_request(default_schema(), "ApiVersions", 0, {}, correlation_id=1, client_id="clé", framed=False)
    header, body = decode_request(default_schema(), data)
    assert header["client_id"] == "clé" and body == {}


@pytest.mark.parametrize("kernel", [True, False], ids=["c-kernel", "pure"])
def test_string_in_a_struct_array_not_utf8(kernel: bool) -> None:
    # Metadata v1 brokers are a flat struct array: the C kernel's, when built.
    fast = default_schema().response("Metadata")
    msg = fast if kernel else Message(fast.spec, kernel=False)
    brokers = [{"node_id": 1, "host": "aa", "port": 9092, "rack": None},
               {"node_id": 2, "host": "zz", "port": 9092, "rack": None}]
    data = msg.encode({"brokers": brokers, "controller_id": 1, "topics": []}, 1)
    at = data.index(b"zz")
    bad = data[:at] + b"\xff\xfe" + data[at + 2:]
    with pytest.raises(ProtocolError, match=rf"Invalid UTF-8.* - at \$\.brokers\[1\]\.host \(byte {at}\)"):
        msg.decode(bad, 1)
