"""The exception of Kafka's internal-topic records."""

from __future__ import annotations

from typing import Any

from kbatch.errors import KBatchError

__all__ = ["InternalRecordError"]


class InternalRecordError(KBatchError, ValueError):
    """A record of an internal topic (``__consumer_offsets``, ``__cluster_metadata``, ...) kbatch cannot decode.

    Either an unknown record type or version (a broker newer than kbatch's
    definitions: decode with ``on_unknown="raw"`` to keep the bytes, or load
    the broker's own definitions with ``schema=``), or malformed bytes.

    Attributes
    ----------
    reason : str
        What is wrong.
    offset : int
        The record's offset in its partition (``-1`` when not known).
    part : str
        ``"key"`` or ``"value"``.
    position : int
        Byte offset inside the key or value where the bad field starts.
    field : str
        The field's path, e.g. ``$.members[0].assignment``, or ``version``.
    """

    def __init__(self, reason: str, offset: int = -1, part: str = "", position: int = -1, field: str = "") -> None:
        self.offset = offset
        self.part = part
        KBatchError.__init__(self, reason, position, field=field)

    def _message(self) -> str:
        where = []
        if self.offset >= 0:
            where.append(f"offset {self.offset}")
        if self.part:
            where.append(self.part + (f" byte {self.position}" if self.position >= 0 else ""))
        if self.field:
            where.append(f"field {self.field}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        # the state keeps what with_context added (path) and anything else set since
        return (type(self), (self.reason, self.offset, self.part, self.position, self.field), dict(self.__dict__))
