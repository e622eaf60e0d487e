"""Where each value's schema id and body are: the registry wire formats, read for a whole table at once.

The framings (Confluent's serializers; Karapace, Redpanda and Apicurio's Confluent mode write
the same)::

    confluent (prefix)   0x00 | id: int32 big-endian | body
    confluent (GUID)     0x01 | GUID: 16 bytes (UUID, big-endian halves) | body
    confluent (header)   record header "__value_schema_id" ("__key_schema_id" for keys):
                         0x01 | GUID (16) (or 0x00 | id int32); the value is all body
    raw                  body only; one schema given for every record

A header is looked for first, and only then the value's prefix, as Confluent's
``DualSchemaIdDeserializer`` does: the *last* header with that key counts
(``Headers.lastHeader``), and one with a null value is as none. Protobuf bodies start with the
message indexes (varints) the Protobuf compiler reads; the framing is the same for every
language.

Everything here works on kbatch's arrays (the table's ``data`` buffer, ``value_start`` /
``value_length``, the header rows) with NumPy: no Python object per record, one per distinct
GUID. A record that is not framed as it should be gets an error code, never a guess; a null
value is null (length -1), not an error.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._errors import ValueDecodeError
from .avro import read_frames

__all__ = [
    "FRAME_BAD_HEADER",
    "FRAME_BAD_MAGIC",
    "FRAME_ERRORS",
    "FRAME_OK",
    "FRAME_TOO_SHORT",
    "Framing",
    "Frames",
    "find_header",
    "frames",
    "parse_frames",
    "schema_id_header",
]

Framing = Literal["confluent", "raw"]

FRAME_OK = 0
#: Fewer bytes than the frame needs (an empty value, 0x00 with fewer than 4 id bytes, ...).
FRAME_TOO_SHORT = 1
#: The first byte is neither 0x00 nor 0x01: not a registry frame.
FRAME_BAD_MAGIC = 2
#: The schema id header is there but is not 0x00 + int32 or 0x01 + 16-byte GUID.
FRAME_BAD_HEADER = 3
#: Error code -> what it means.
FRAME_ERRORS = {
    FRAME_TOO_SHORT: "too short for a schema registry frame",
    FRAME_BAD_MAGIC: "no schema registry frame",
    FRAME_BAD_HEADER: "bad schema id header",
}

MAGIC_ID = 0x00
MAGIC_GUID = 0x01
ID_SIZE = 4
GUID_SIZE = 16
ID_FRAME = 1 + ID_SIZE  # bytes before the body
GUID_FRAME = 1 + GUID_SIZE


def schema_id_header(column: str) -> bytes:
    """The header carrying the schema id of ``column`` (``value`` or ``key``)."""
    return f"__{column}_schema_id".encode()


class Frames:
    """Each record's schema id (or GUID) and body, as arrays.

    Attributes
    ----------
    schema_id : numpy.ndarray of int32
        The writer schema's id; -1 where the record names none (null, GUID, error, or raw
        framing without an id).
    guid_index : numpy.ndarray of int32
        Index into :attr:`guids` where the record names its schema by GUID, else -1.
    guids : tuple of uuid.UUID
        The distinct GUIDs met, in byte order.
    start, length : numpy.ndarray of int64
        The body's position in :attr:`data` and its size; length -1 for a null value and for
        a record with an error (so a decoder that skips the error check gives null, never
        garbage).
    error : numpy.ndarray of uint8
        :data:`FRAME_OK`, or the error code (:data:`FRAME_ERRORS`).
    data : buffer
        The bytes ``start`` points into.
    column : str
        ``"value"`` or ``"key"``.
    """

    __slots__ = ("schema_id", "guid_index", "guids", "start", "length", "error", "data", "column",
                 "_raw_start", "_raw_length", "_header_length")

    def __init__(
        self, schema_id: npt.NDArray[np.int32], guid_index: npt.NDArray[np.int32], guids: tuple[uuid.UUID, ...],
        start: npt.NDArray[np.int64], length: npt.NDArray[np.int64], error: npt.NDArray[np.uint8],
        data: Any, column: str, raw: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    ) -> None:
        self.schema_id, self.guid_index, self.guids = schema_id, guid_index, guids
        self.start, self.length, self.error = start, length, error
        self.data, self.column = data, column
        self._raw_start, self._raw_length, self._header_length = raw

    def __len__(self) -> int:
        return len(self.error)

    def __repr__(self) -> str:
        bad = int(np.count_nonzero(self.error))
        ids = np.unique(self.schema_id[self.schema_id >= 0]).tolist()
        return f"<Frames {len(self)} {self.column}s, schema ids {ids}, {len(self.guids)} GUIDs, {bad} errors>"

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        """Records whose framing is fine (null values included)."""
        ok: npt.NDArray[np.bool_] = self.error == FRAME_OK
        return ok

    def describe(self, i: int) -> tuple[str, int]:
        """Record ``i``'s framing error as ``(message, byte position in the value)`` (-1 when it
        is in the header); ``("", -1)`` when there is none."""
        code = int(self.error[i])
        if code == FRAME_OK:
            return "", -1
        buf = _as_bytes(self.data)
        start, length = int(self._raw_start[i]), int(self._raw_length[i])
        header = schema_id_header(self.column).decode()
        if code == FRAME_BAD_HEADER:
            size = int(self._header_length[i])
            return f"{FRAME_ERRORS[code]} {header}: {size} bytes, expected 0x00 + 4-byte id or 0x01 + 16-byte GUID", -1
        if code == FRAME_BAD_MAGIC:
            return (f"{FRAME_ERRORS[code]}: magic byte 0x{int(buf[start]):02x}, expected 0x00 (schema id) or "
                    f"0x01 (GUID)"), 0
        if length == 0:
            return f"{FRAME_ERRORS[code]}: the {self.column} is empty", 0
        need = ID_FRAME if buf[start] == MAGIC_ID else GUID_FRAME
        return f"{FRAME_ERRORS[code]}: {length} bytes, the frame needs {need}", length

    def error_at(self, i: int, *, offset: int = -1, partition: int = -1, topic: str = "") -> ValueDecodeError:
        """Record ``i``'s framing error as the exception that reports it."""
        message, position = self.describe(i)
        return ValueDecodeError(message, offset=offset, partition=partition, topic=topic, path=self.column,
                                position=position)

    def check(self, offsets: npt.ArrayLike | None = None, *, partition: int = -1, topic: str = "") -> None:
        """Raise :class:`ValueDecodeError` for the first record with a framing error, if any.

        ``offsets`` (the table's ``records["offset"]``) lets the message name the record.
        """
        bad = np.flatnonzero(self.error)
        if bad.size:
            i = int(bad[0])
            offset = int(np.asarray(offsets)[i]) if offsets is not None else -1
            raise self.error_at(i, offset=offset, partition=partition, topic=topic)


def _as_bytes(data: Any) -> npt.NDArray[np.uint8]:
    view = memoryview(data).cast("B")
    return np.frombuffer(view, dtype=np.uint8) if len(view) else np.empty(0, np.uint8)


def _gather(buf: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.uint8]:
    """``buf[at[i] : at[i] + size]`` for every i, as rows (every range checked by the caller)."""
    gathered: npt.NDArray[np.uint8] = buf[at[:, None] + np.arange(size, dtype=np.int64)]
    return gathered


def find_header(
    records: npt.NDArray[Any], headers: npt.NDArray[Any], data: Any, name: bytes,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each record's last header called ``name``: its value's ``(start, length)``; length -2
    where the record has no such header, -1 where its value is null.

    ``records`` and ``headers`` are a :class:`kbatch.RecordTable`'s rows, ``data`` its buffer.
    """
    n = len(records)
    start = np.zeros(n, dtype=np.int64)
    length = np.full(n, -2, dtype=np.int64)
    rows = np.asarray(headers).view(np.ndarray)
    if not len(rows) or not n:
        return start, length
    buf = _as_bytes(data)
    candidates = np.flatnonzero(rows["key_length"] == len(name))
    if not candidates.size:
        return start, length
    keys = _gather(buf, rows["key_start"][candidates].astype(np.int64), len(name))
    matched = candidates[(keys == np.frombuffer(name, dtype=np.uint8)).all(axis=1)]
    if not matched.size:
        return start, length
    first = records["headers_start"].astype(np.int64)
    count = records["headers_count"].astype(np.int64)
    owner = np.searchsorted(first, matched, side="right") - 1
    if ((owner < 0) | (matched < first[np.maximum(owner, 0)])
            | (matched >= first[np.maximum(owner, 0)] + count[np.maximum(owner, 0)])).any():
        raise ValueError("header rows are not in record order (headers_start)")
    # the last matching header of each record wins, as Kafka's Headers.lastHeader
    reverse_owner = owner[::-1]
    owners, at = np.unique(reverse_owner, return_index=True)
    last = matched[::-1][at]
    start[owners] = rows["value_start"][last]
    length[owners] = rows["value_length"][last]
    return start, length


def parse_frames(
    data: Any,
    starts: npt.ArrayLike,
    lengths: npt.ArrayLike,
    *,
    framing: Framing = "confluent",
    schema_id: int = -1,
    header: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
    column: str = "value",
) -> Frames:
    """Each value's schema id (or GUID) and body, from kbatch's ``(data, start, length)`` arrays.

    Parameters
    ----------
    data : buffer
        The bytes every start points into (a ``RecordTable``'s ``data``).
    starts, lengths : array of int
        Each value's position and size (length -1: null).
    framing : {"confluent", "raw"}
        ``"confluent"``: the schema id header, else the ``0x00``/``0x01`` prefix; ``"raw"``:
        every value is all body, written with ``schema_id``.
    schema_id : int, default -1
        With ``"raw"``, the id every body is said to be written with.
    header : (array, array), optional
        Each record's schema id header value as ``(start, length)`` (length -2: absent, -1:
        null), as :func:`find_header` gives them; none looked for when omitted.
    column : str
        ``"value"`` or ``"key"``, for messages.

    Returns
    -------
    Frames
    """
    if framing not in ("confluent", "raw"):
        raise ValueError(f"framing must be 'confluent' or 'raw', got {framing!r}")
    start = np.array(starts, dtype=np.int64)  # copies: the raw ranges, kept for messages
    length = np.array(lengths, dtype=np.int64)
    if start.shape != length.shape or start.ndim != 1:
        raise ValueError("starts and lengths must be one-dimensional arrays of one length")
    buf = _as_bytes(data)
    n = len(start)
    if framing == "raw":
        live = length >= 0
        if live.any() and (start[live].min() < 0 or (start[live] + length[live]).max() > len(buf)):
            raise ValueError("a (start, length) range lies outside the data buffer")
        ids = np.where(live, np.int32(schema_id), np.int32(-1)).astype(np.int32)
        raw = (start, length, np.full(n, -2, dtype=np.int64))
        return Frames(ids, np.full(n, -1, dtype=np.int32), (), start.copy(), length.copy(),
                      np.zeros(n, dtype=np.uint8), data, column, raw)

    # one C pass: the header's id or the prefix's, the body past the prefix, the errors
    none = np.empty(0, dtype=np.int64)
    h_start, h_length = none, none
    if header is not None:
        h_start = np.ascontiguousarray(header[0], dtype=np.int64)
        h_length = np.ascontiguousarray(header[1], dtype=np.int64)
    ids = np.empty(n, dtype=np.int32)
    guid_at = np.empty(n, dtype=np.int64)
    error = np.empty(n, dtype=np.uint8)
    body_start = np.empty(n, dtype=np.int64)
    body_length = np.empty(n, dtype=np.int64)
    _, nguid = read_frames(buf if len(buf) else np.zeros(1, np.uint8), start, length, h_start, h_length, ids, guid_at,
                           error, body_start, body_length, FRAME_TOO_SHORT, FRAME_BAD_MAGIC, FRAME_BAD_HEADER)
    raw = (start, length, h_length if header is not None else np.full(n, -2, dtype=np.int64))
    start, length = body_start, body_length

    guid_index = np.full(n, -1, dtype=np.int32)
    guids: tuple[uuid.UUID, ...] = ()
    named = np.flatnonzero(guid_at >= 0) if nguid else np.empty(0, dtype=np.int64)
    if named.size:
        rows = _gather(buf, guid_at[named], GUID_SIZE)
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        guid_index[named] = inverse.reshape(-1)
        guids = tuple(uuid.UUID(bytes=row.tobytes()) for row in distinct)
    return Frames(ids, guid_index, guids, start, length, error, data, column, raw)


def frames(table: Any, *, column: str = "value", framing: Framing = "confluent", schema_id: int = -1) -> Frames:
    """The frames of a :class:`kbatch.RecordTable`'s values (or keys): the schema id header
    (``__value_schema_id`` / ``__key_schema_id``) first, then the prefix; see :func:`parse_frames`."""
    if column not in ("value", "key"):
        raise ValueError(f"column must be 'value' or 'key', got {column!r}")
    records = table.records
    header = None
    if framing == "confluent":
        header = find_header(records, table.headers, table.data, schema_id_header(column))
    return parse_frames(table.data, records[f"{column}_start"], records[f"{column}_length"], framing=framing,
                        schema_id=schema_id, header=header, column=column)
