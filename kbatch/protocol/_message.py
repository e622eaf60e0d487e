"""Compiled message codecs, the schema registry, and request/response framing."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from ._compile import ENCODE_KERNEL, KERNEL, compile_decoder, compile_encoder, find_encode_error, uvarint_tail
from ._errors import ProtocolError
from ._schema import MessageSpec, parse_message

__all__ = [
    "Message",
    "Schema",
    "decode_request",
    "decode_response",
    "default_schema",
    "encode_request",
    "encode_response",
]

Decoder = Callable[[memoryview, Any, int, int], "tuple[dict[str, Any], int]"]
Encoder = Callable[[dict[str, Any], "list[Any]"], None]

_HDR = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

API_VERSIONS_KEY = 18


def _view(data: Any) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


class Message:
    """Encoder and decoder for one message definition, compiled per version.

    Messages are plain ``dict`` objects keyed by the snake_case field names
    (``ThrottleTimeMs`` -> ``throttle_time_ms``); nested structs are dicts and
    arrays are lists. Dicts were chosen because building one from a literal is
    the fastest object construction CPython has, and they print, compare and
    serialise (JSON, pickle) without help. Value types when decoding (any
    sequence is accepted when encoding):

    ========================  =================================================
    bool, int*, uint*         ``bool`` / ``int``
    float64                   ``float``
    string                    ``str`` (``None`` when nullable and null)
    bytes                     ``bytes``
    records                   :class:`~kbatch.protocol.Records` (zero-copy view)
    uuid                      ``uuid.UUID`` (the zero UUID for "none")
    []bool, []int*, []float   ``tuple`` (immutable: one allocation, not two)
    []string, []uuid, ...     ``list``
    struct / []struct         ``dict`` / ``list[dict]``; a
                              :class:`~kbatch.protocol.KeyedList` (lookup by
                              key) when the struct has ``mapKey`` fields
    unknown tagged fields     ``d["_unknown_tags"] = {tag: bytes}``, only if any
    ========================  =================================================

    Decoded dicts hold exactly the fields of the decoded version (tagged ones
    with their default when absent, except tagged structs, which are ``None``
    when absent: Kafka's default struct of defaults costs a dict per element). When encoding, a missing key means the
    field's default; a key for a field the version lacks must hold the default
    unless the field is ``ignorable``.

    Examples
    --------
    >>> from kbatch.protocol import default_schema
    >>> req = default_schema()["FindCoordinatorRequest"]
    >>> data = req.encode({"key": "txn-1", "key_type": 1}, version=3)
    >>> data.hex()
    '0674786e2d310100'
    >>> req.decode(data, version=3)
    {'key': 'txn-1', 'key_type': 1}
    """

    def __init__(self, spec: MessageSpec, *, kernel: bool = True) -> None:
        self.spec = spec
        self.kernel = kernel and KERNEL is not None
        self.name = spec.name
        self.type = spec.type
        self.api_key = spec.api_key
        self._decoders: dict[int, Decoder] = {}
        self._encoders: dict[int, Encoder] = {}
        self._sources: dict[tuple[str, int], str] = {}

    def __repr__(self) -> str:
        return f"<Message {self.name} versions {self.spec.valid}>"

    @property
    def versions(self) -> range:
        """The valid versions."""
        return range(self.spec.valid.lo, self.spec.valid.hi + 1)

    @property
    def min_version(self) -> int:
        """The lowest valid version."""
        return self.spec.valid.lo

    @property
    def max_version(self) -> int:
        """The highest valid version."""
        return self.spec.valid.hi

    def flexible(self, version: int) -> bool:
        """Whether ``version`` is a flexible version (compact types, tagged fields)."""
        return version in self.spec.flexible

    def header_version(self, version: int) -> int:
        """The header version that goes with this message version.

        Requests use header v2 in flexible versions, else v1; responses use
        v1 in flexible versions, else v0, except ApiVersionsResponse, which is
        always v0 so that a client can read it whatever version it asked for.
        """
        flexible = version in self.spec.flexible
        if self.type == "request":
            return 2 if flexible else 1
        if self.type == "response":
            if self.api_key == API_VERSIONS_KEY:
                return 0
            return 1 if flexible else 0
        raise ValueError(f"{self.name} is a {self.type}, it has no header")

    def _check_version(self, version: int) -> None:
        if type(version) is not int or version not in self.spec.valid:
            raise ProtocolError(f"{self.name} has no version {version!r} (valid: {self.spec.valid})")

    def decoder(self, version: int) -> Decoder:
        """The compiled ``decode(data, pos, end) -> (dict, pos)`` for ``version``."""
        fn = self._decoders.get(version)
        if fn is None:
            self._check_version(version)
            fn, src = compile_decoder(self.spec.fields, version, version in self.spec.flexible, self.name,
                                      kernel=KERNEL if self.kernel else None)
            self._decoders[version] = fn
            self._sources[("decode", version)] = src
        return fn

    def encoder(self, version: int) -> Encoder:
        """The compiled ``encode(message, parts)`` for ``version``."""
        fn = self._encoders.get(version)
        if fn is None:
            self._check_version(version)
            fn, src = compile_encoder(self.spec.fields, version, version in self.spec.flexible, self.name,
                                      kernel=ENCODE_KERNEL if self.kernel else None)
            self._encoders[version] = fn
            self._sources[("encode", version)] = src
        return fn

    def source(self, version: int, which: str = "decode") -> str:
        """The generated Python source of the decoder (or encoder) for ``version``."""
        if which == "decode":
            self.decoder(version)
        else:
            self.encoder(version)
        return self._sources[(which, version)]

    def decode(self, data: Any, version: int) -> dict[str, Any]:
        """Decode a whole buffer holding exactly one message body.

        Parameters
        ----------
        data : bytes-like
            The message body (no size prefix, no header).
        version : int
            The message version.

        Returns
        -------
        dict
            ``records`` fields are views into ``data``.

        Raises
        ------
        ProtocolError
            Malformed input or bytes left over after the message.
        """
        view = _view(data)
        end = len(view)
        buf = data if type(data) is bytes or type(data) is bytearray else view
        msg, pos = self.decoder(version)(view, buf, 0, end)
        if pos != end:
            raise ProtocolError(f"{end - pos} bytes left over after the message", pos, "$")
        return msg

    def decode_from(self, data: Any, pos: int, version: int, end: int = -1) -> tuple[dict[str, Any], int]:
        """Decode one message starting at ``pos``; return it and the position after it."""
        view = _view(data)
        if end < 0:
            end = len(view)
        if not 0 <= pos <= end <= len(view):
            raise ProtocolError(f"Invalid range {pos}..{end} of a {len(view)}-byte buffer")
        buf = data if type(data) is bytes or type(data) is bytearray else view
        return self.decoder(version)(view, buf, pos, end)

    def encode_parts(self, message: dict[str, Any], version: int) -> list[Any]:
        """Encode into a list of buffers without copying large ``records`` values.

        The concatenation of the parts is the encoding. Records of 2 KiB or
        more are their own part (a ``memoryview`` of the caller's buffer), so
        a Produce request or Fetch response can go to ``socket.sendmsg`` as it
        is; the other parts are ``bytearray`` objects.
        """
        parts: list[Any] = []
        fn = self.encoder(version)
        try:
            fn(message, parts)
        except ProtocolError:
            raise
        except Exception as exc:
            err = find_encode_error(self.spec.fields, message, version, version in self.spec.flexible)
            if err is None:
                err = ProtocolError(f"{type(exc).__name__}: {exc}", -1, "$")
            raise err from exc
        return parts

    def encode(self, message: dict[str, Any], version: int) -> bytes:
        """Encode ``message`` as ``version``; return the body bytes (no size, no header).

        The parts of :meth:`encode_parts` are joined into one new ``bytes``
        (sized once, each records value copied once); for big records that
        copy is most of the cost, and :meth:`encode_parts` avoids it.

        Raises
        ------
        ProtocolError
            A value of the wrong type or out of range, a null in a field that
            is not nullable, or a non-default value in a field the version
            lacks that is not ignorable.
        """
        parts = self.encode_parts(message, version)
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def default(self, version: int) -> dict[str, Any]:
        """A message of ``version`` with every field at its default."""
        self._check_version(version)
        return {f.key: None if f.is_tagged(version) and f.kind == "struct" and not f.array else f.default(version)
                for f in self.spec.fields if f.present(version)}


class Schema:
    """A set of message definitions, keyed by name and by API key.

    Parameters
    ----------
    specs : iterable of MessageSpec

    Examples
    --------
    >>> s = default_schema()
    >>> s.request(1), s.response("Fetch").max_version
    (<Message FetchRequest versions 4-18>, 18)
    """

    def __init__(self, specs: Iterable[MessageSpec]) -> None:
        self._by_name: dict[str, Message] = {}
        self._requests: dict[int, Message] = {}
        self._responses: dict[int, Message] = {}
        self._api_names: dict[str, int] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: MessageSpec) -> Message:
        """Add (or replace) one definition."""
        msg = Message(spec)
        self._by_name[spec.name] = msg
        if spec.api_key is not None and spec.type in ("request", "response"):
            table = self._requests if spec.type == "request" else self._responses
            table[spec.api_key] = msg
            base = spec.name[: -len(spec.type)] if spec.name.lower().endswith(spec.type) else spec.name
            self._api_names[base] = spec.api_key
        return msg

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Schema:
        """Load every ``*.json`` definition in a directory.

        Works on Kafka's own ``clients/src/main/resources/common/message``.
        """
        files = sorted(Path(path).glob("*.json"))
        if not files:
            raise FileNotFoundError(f"no *.json message definitions in {path}")
        return cls(parse_message(p.read_text(encoding="utf-8")) for p in files)

    def __getitem__(self, name: str) -> Message:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Message]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def api_key(self, api: int | str) -> int:
        """The API key for a key or an API name (``"Fetch"``)."""
        if isinstance(api, int):
            return api
        try:
            return self._api_names[api]
        except KeyError:
            raise KeyError(f"unknown API {api!r}") from None

    def request(self, api: int | str) -> Message:
        """The request message of an API (by key or name)."""
        return self._requests[self.api_key(api)]

    def response(self, api: int | str) -> Message:
        """The response message of an API (by key or name)."""
        return self._responses[self.api_key(api)]

    @property
    def api_keys(self) -> list[int]:
        """API keys that have both a request and a response."""
        return sorted(set(self._requests) & set(self._responses))


_DEFAULT: Schema | None = None


def default_schema() -> Schema:
    """The definitions shipped with kbatch (``kbatch/protocol/definitions``)."""
    global _DEFAULT
    if _DEFAULT is None:
        root = resources.files("kbatch.protocol") / "definitions"
        _DEFAULT = Schema(
            parse_message(p.read_text(encoding="utf-8"))
            for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".json")
        )
    return _DEFAULT


# --------------------------------------------------------------------------- headers + framing


def _encode_request_header(api_key: int, version: int, correlation_id: int, client_id: str | None,
                           header_version: int) -> bytearray:
    b = bytearray(_HDR.pack(api_key, version, correlation_id))
    if client_id is None:
        b += b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        if len(raw) > 32767:
            raise ProtocolError("String of more than 32767 bytes", -1, "header.client_id")
        b += _I16.pack(len(raw)) + raw
    if header_version >= 2:
        b.append(0)  # no tagged fields
    return b


def _skip_tags(view: memoryview, pos: int, end: int, where: str) -> int:
    def uv(p: int) -> tuple[int, int]:
        if p >= end:
            raise ProtocolError("Expected an unsigned varint, no bytes left", p, where)
        first = view[p]
        value, p2 = (first, p + 1) if first < 128 else uvarint_tail(view, p + 1, first, end)
        if value < 0:
            raise ProtocolError("Invalid unsigned varint", p, where)
        return value, p2

    count, pos = uv(pos)
    for _ in range(count):
        _, pos = uv(pos)
        size, pos = uv(pos)
        if pos + size > end:
            raise ProtocolError(f"Expected {size} bytes, {end - pos} left", pos, where)
        pos += size
    return pos


def encode_request(schema: Schema, api: int | str, version: int, message: dict[str, Any], *,
                   correlation_id: int, client_id: str | None = "kbatch", framed: bool = True) -> bytes:
    """Encode a request with its header (and, if ``framed``, the int32 size).

    Examples
    --------
    >>> s = default_schema()
    >>> encode_request(s, "ApiVersions", 0, {}, correlation_id=7, client_id="c").hex()
    '0000000b0012000000000007000163'
    """
    parts = encode_request_parts(schema, api, version, message, correlation_id=correlation_id,
                                 client_id=client_id, framed=framed)
    return b"".join(parts)


def encode_request_parts(schema: Schema, api: int | str, version: int, message: dict[str, Any], *,
                         correlation_id: int, client_id: str | None = "kbatch",
                         framed: bool = True) -> list[Any]:
    """Like :func:`encode_request`, as a list of buffers (records not copied)."""
    msg = schema.request(api)
    assert msg.api_key is not None
    body = msg.encode_parts(message, version)
    head = _encode_request_header(msg.api_key, version, correlation_id, client_id,
                                  msg.header_version(version))
    if framed:
        size = len(head) + sum(memoryview(p).nbytes for p in body)
        head[0:0] = _I32.pack(size)
    return [head, *body]


def decode_request(schema: Schema, data: Any, *, framed: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decode a request with its header; return ``(header, message)``.

    The header gives the API key and version, so nothing else is needed.
    """
    view = _view(data)
    end = len(view)
    pos = 0
    if framed:
        if end < 4:
            raise ProtocolError("Expected 4 bytes, fewer left", 0, "size")
        (size,) = _I32.unpack_from(view, 0)
        if size != end - 4:
            raise ProtocolError(f"Frame size {size} but {end - 4} bytes follow", 0, "size")
        pos = 4
    if end - pos < 10:
        raise ProtocolError(f"Expected at least 10 header bytes, {end - pos} left", pos, "header")
    header_at = pos  # request_api_key int16, request_api_version int16, correlation_id int32, client_id
    api_key, version, correlation_id = _HDR.unpack_from(view, pos)
    pos += 8
    (n,) = _I16.unpack_from(view, pos)
    pos += 2
    client_id: str | None = None
    if n >= 0:
        if pos + n > end:
            raise ProtocolError(f"Expected {n} bytes, {end - pos} left", pos, "header.client_id")
        try:
            client_id = str(view[pos:pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"Invalid UTF-8: {exc.reason}", pos, "header.client_id") from None
        pos += n
    try:
        msg = schema.request(api_key)
    except KeyError:
        raise ProtocolError(f"Unknown API key {api_key}", header_at, "header.request_api_key") from None
    if version not in msg.spec.valid:
        raise ProtocolError(f"{msg.name} has no version {version} (valid: {msg.spec.valid})", header_at + 2,
                            "header.request_api_version")
    if msg.header_version(version) >= 2:
        pos = _skip_tags(view, pos, end, "header._tagged_fields")
    header = {"request_api_key": api_key, "request_api_version": version,
              "correlation_id": correlation_id, "client_id": client_id}
    body, pos = msg.decode_from(data, pos, version)
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes left over after the message", pos, "$")
    return header, body


def encode_response(schema: Schema, api: int | str, version: int, message: dict[str, Any], *,
                    correlation_id: int, framed: bool = True) -> bytes:
    """Encode a response with its header (and, if ``framed``, the int32 size)."""
    msg = schema.response(api)
    body = msg.encode_parts(message, version)
    head = bytearray(_I32.pack(correlation_id))
    if msg.header_version(version) >= 1:
        head.append(0)
    if framed:
        size = len(head) + sum(memoryview(p).nbytes for p in body)
        head[0:0] = _I32.pack(size)
    return b"".join([head, *body])


def decode_response(schema: Schema, api: int | str, version: int, data: Any, *,
                    framed: bool = False, strict: bool = True) -> tuple[int, dict[str, Any]]:
    """Decode a response with its header; return ``(correlation_id, message)``.

    An ApiVersionsResponse whose error code is 35 (UNSUPPORTED_VERSION) is
    decoded as version 0, as brokers send it, whatever version was asked.
    Bytes left over after the message are an error unless ``strict`` is false.
    """
    msg = schema.response(api)
    view = _view(data)
    end = len(view)
    pos = 0
    if framed:
        if end < 4:
            raise ProtocolError("Expected 4 bytes, fewer left", 0, "size")
        (size,) = _I32.unpack_from(view, 0)
        if size != end - 4:
            raise ProtocolError(f"Frame size {size} but {end - 4} bytes follow", 0, "size")
        pos = 4
    if end - pos < 4:
        raise ProtocolError(f"Expected 4 bytes, {end - pos} left", pos, "header.correlation_id")
    (correlation_id,) = _I32.unpack_from(view, pos)
    pos += 4
    if msg.header_version(version) >= 1:
        pos = _skip_tags(view, pos, end, "header._tagged_fields")
    if msg.api_key == API_VERSIONS_KEY and version > 0 and end - pos >= 2:
        (error_code,) = _I16.unpack_from(view, pos)
        if error_code == 35:
            version = 0
    body, pos = msg.decode_from(data, pos, version)
    if pos != end and strict:
        raise ProtocolError(f"{end - pos} bytes left over after the message", pos, "$")
    return correlation_id, body
