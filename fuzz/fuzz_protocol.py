"""Fuzz the protocol codec (``kbatch.protocol``): every shipped API and version, C kernel vs pure.

Input layout (``fuzz/make_seeds.py`` writes seeds in it)::

    which    uint8   bit 7 clear: a message body; the message is shipped message number
                     (bits 0-6 modulo their count), in alphabetical order of name.
                     bit 7 set: a whole request, header included (decode_request).
    version  uint8   index into that message's valid versions (modulo their count)
    data     bytes   the body, or the request

Each body is decoded twice, by the generated decoders with the C kernels
(``kbatch/protocol/_kernel.pyx``) and by the generated Python alone (as
``KBATCH_PROTOCOL_PURE=1`` does). Oracle: only ``ProtocolError`` escapes, with a position
inside the input; both paths give the same message or the same error (class, position,
field path); a decoded message encodes again and decodes to itself. Requests go through
``decode_request`` with both schemas, with the same checks. ``decode_request``'s
``UnicodeDecodeError`` on a non-UTF-8 ``client_id`` (issue 15, defect 6) is tolerated when
``KBATCH_FUZZ_KNOWN`` names ``client_id``.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    from kbatch import protocol
    from kbatch.protocol import ProtocolError

import oracle

KERNEL = protocol.default_schema()
PURE = protocol.Schema(m.spec for m in KERNEL)
for _m in PURE:
    _m.kernel = False
NAMES = sorted(m.name for m in KERNEL)


def _plain(value: Any) -> Any:
    """A decoded message as plain comparable data (Records views become their bytes)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, bytes, int, float, bool, uuid.UUID)) or value is None:
        return value
    return ("buffer", bytes(memoryview(value)))


def _outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        result = fn(data)
    except UnicodeDecodeError as exc:
        if oracle.known("client_id"):
            return "known", str(exc)
        raise
    except Exception as exc:
        if not isinstance(exc, ProtocolError):
            raise
        if exc.position < 0 and "has no version" in exc.reason and oracle.known("request_version"):
            return "known", str(exc)
        err = oracle.check_error(exc, len(data))
        return "error", (type(err).__name__, err.position, err.path, str(err))
    return "ok", result


def _same(kernel: tuple[str, Any], pure: tuple[str, Any], what: str) -> None:
    a = kernel if kernel[0] != "ok" else ("ok", _plain(kernel[1]))
    b = pure if pure[0] != "ok" else ("ok", _plain(pure[1]))
    oracle.check(a == b, f"{what}: the C kernel gives {str(a)[:400]}, the pure path {str(b)[:400]}")


def _round_trip(msg: Any, decoded: dict[str, Any], version: int, what: str) -> None:
    try:
        again = msg.encode(decoded, version)
    except ProtocolError as exc:
        raise oracle.Finding(f"{what}: a decoded message does not encode again: {exc}") from exc
    oracle.check(_plain(msg.decode(again, version)) == _plain(decoded), f"{what}: decode(encode(m)) != m")


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 2:
        return
    which, vbyte, data = raw[0], raw[1], raw[2:]
    if which & 0x80:
        k = _outcome(lambda d: protocol.decode_request(KERNEL, d), data)
        p = _outcome(lambda d: protocol.decode_request(PURE, d), data)
        _same(k, p, "decode_request")
        if k[0] == "ok":
            header, body = k[1]
            msg = KERNEL.request(header["request_api_key"])
            _round_trip(msg, body, header["request_api_version"], f"{msg.name} v{header['request_api_version']}")
        return
    name = NAMES[(which & 0x7F) % len(NAMES)]
    km, pm = KERNEL[name], PURE[name]
    versions = list(km.versions)
    version = versions[vbyte % len(versions)]
    k = _outcome(lambda d: km.decode(d, version), data)
    p = _outcome(lambda d: pm.decode(d, version), data)
    what = f"{name} v{version}"
    _same(k, p, what)
    if k[0] == "ok":
        _round_trip(km, k[1], version, what)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
