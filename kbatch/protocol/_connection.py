"""A small blocking connection to a Kafka broker, for tests and examples.

It frames requests, matches correlation ids and negotiates versions with
ApiVersions. It is not a client: no metadata cache, no retries, no
reconnects, no TLS or SASL.
"""

from __future__ import annotations

import socket
import struct
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kbatch._version import __version__

from ._errors import ProtocolError
from ._message import (
    API_VERSIONS_KEY,
    Schema,
    decode_response,
    default_schema,
    encode_request_parts,
)

__all__ = ["Connection"]

_I32 = struct.Struct(">i")

if TYPE_CHECKING:
    from typing_extensions import Self


class Connection:
    """One blocking TCP connection to a broker.

    Parameters
    ----------
    host, port : str, int
        The broker's address.
    client_id : str, optional
        Sent in every request header.
    timeout : float, optional
        Seconds allowed for connecting and for every send and receive.
    schema : Schema, optional
        Message definitions; kbatch's own by default.
    max_response_size : int, optional
        Larger responses are refused before any buffer is allocated.
    negotiate : bool, optional
        Send ApiVersions on connect (default) so that :meth:`request` can pick
        versions.
    strict : bool, optional
        Refuse responses with bytes after the message (default). Some peers
        (librdkafka's mock cluster) append a stray byte to flexible responses.

    Examples
    --------
    ::

        with Connection("127.0.0.1", 9092) as conn:
            meta = conn.request("Metadata", {"topics": None})
            print(conn.api_versions[1])  # the broker's Fetch versions
    """

    def __init__(self, host: str, port: int, *, client_id: str | None = "kbatch", timeout: float = 10.0,
                 schema: Schema | None = None, max_response_size: int = 256 << 20,
                 negotiate: bool = True, strict: bool = True) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.schema = schema if schema is not None else default_schema()
        self.max_response_size = max_response_size
        self.strict = strict
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._next_id = 1
        self._unanswered: set[int] = set()
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if negotiate:
                self.negotiate()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_bootstrap(cls, bootstrap: str, **kwargs: Any) -> Connection:
        """Connect to the first reachable ``host:port`` of a comma-separated list."""
        last: Exception | None = None
        for item in bootstrap.split(","):
            host, _, port = item.strip().rpartition(":")
            try:
                return cls(host.strip("[]"), int(port), **kwargs)
            except OSError as exc:
                last = exc
        raise ConnectionError(f"no broker reachable in {bootstrap!r}") from last

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    # ------------------------------------------------------------------ versions

    def negotiate(self) -> dict[int, tuple[int, int]]:
        """Ask the broker which versions it supports (ApiVersions).

        Sends the newest ApiVersions this schema knows; a broker that does not
        support it answers in version 0 with error 35 and its own range, and
        the request is repeated with the newest version both support.
        """
        msg = self.schema.request(API_VERSIONS_KEY)
        version = msg.max_version
        body = {"client_software_name": "kbatch", "client_software_version": _version()}
        for _ in range(3):
            try:
                response = self.request(API_VERSIONS_KEY, body, version=version)
            except ProtocolError:
                # Kafka answers an unsupported version in version 0 with error 35
                # (handled below); some implementations (librdkafka's mock) send
                # a body that is not version 0. Version 0 is always supported.
                if version == 0:
                    raise
                version = 0
                continue
            keys = {e["api_key"]: (e["min_version"], e["max_version"]) for e in response["api_keys"]}
            if response["error_code"] == 35:
                version = min(keys.get(API_VERSIONS_KEY, (0, 0))[1], msg.max_version)
                continue
            if response["error_code"] != 0:
                raise ProtocolError(f"ApiVersions failed with error code {response['error_code']}")
            self.api_versions = keys
            return keys
        raise ProtocolError("ApiVersions negotiation did not converge")

    def version(self, api: int | str) -> int:
        """The newest version of ``api`` both the broker and the schema support."""
        key = self.schema.api_key(api)
        msg = self.schema.request(key)
        if key not in self.api_versions:
            raise ProtocolError(f"The broker does not support API {api!r} (key {key})")
        lo, hi = self.api_versions[key]
        best = min(hi, msg.max_version)
        if best < max(lo, msg.min_version):
            raise ProtocolError(f"No common version for API {api!r}: broker {lo}-{hi}, "
                                f"kbatch {msg.min_version}-{msg.max_version}")
        return best

    # ------------------------------------------------------------------ I/O

    def send(self, api: int | str, message: dict[str, Any], version: int | None = None) -> tuple[int, int]:
        """Send a request; return ``(correlation_id, version)``."""
        key = self.schema.api_key(api)
        if version is None:
            version = self.version(key)
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        parts = encode_request_parts(self.schema, key, version, message,
                                     correlation_id=correlation_id, client_id=self.client_id)
        views = [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]
        while views:
            sent = self._sock.sendmsg(views[:64])
            while views and sent >= views[0].nbytes:
                sent -= views.pop(0).nbytes
            if sent:
                views[0] = views[0][sent:]
        return correlation_id, version

    def _recv_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError(f"connection closed after {got} of {n} bytes")
            got += k
        return buf

    def receive_raw(self) -> bytearray:
        """Read one size-prefixed response frame (without the size)."""
        (size,) = _I32.unpack(self._recv_exactly(4))
        if size < 4 or size > self.max_response_size:
            raise ProtocolError(f"Response size {size} outside [4, {self.max_response_size}]", 0, "size")
        return self._recv_exactly(size)

    def receive(self, api: int | str, version: int, correlation_id: int) -> dict[str, Any]:
        """Read and decode the response to a request sent with :meth:`send`."""
        while True:
            frame = self.receive_raw()
            got = _I32.unpack_from(frame, 0)[0] if len(frame) >= 4 else -1
            if got != correlation_id and got in self._unanswered:
                # a response to an acks=0 Produce, which Kafka never sends but
                # some peers (librdkafka's mock) do: skip it
                self._unanswered.discard(got)
                continue
            break
        got, body = decode_response(self.schema, api, version, frame, strict=self.strict)
        if got != correlation_id:
            raise ProtocolError(f"Correlation id {got} does not match the request's {correlation_id}",
                                0, "header.correlation_id")
        return body

    def request(self, api: int | str, message: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        """Send a request and wait for its response.

        A Produce request with ``acks=0`` gets no response; an empty dict is
        returned at once (and a response that arrives anyway is skipped).
        """
        key = self.schema.api_key(api)
        correlation_id, version = self.send(key, message, version)
        if key == 0 and message.get("acks") == 0:
            if len(self._unanswered) > 1000:
                self._unanswered.clear()
            self._unanswered.add(correlation_id)
            return {}
        return self.receive(key, version, correlation_id)


def _version() -> str:
    return str(__version__)
