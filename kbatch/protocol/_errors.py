"""The protocol codec's exception."""

from __future__ import annotations

from kbatch.errors import KBatchError

__all__ = ["ProtocolError"]


class ProtocolError(KBatchError, ValueError):
    """A Kafka protocol message that cannot be decoded or encoded.

    The message names the field by its path from the message root (Python key
    names, array indices in brackets) and, for decoding, the byte offset in
    the input, in the style of msgspec::

        Expected 4 bytes, 2 left - at $.responses[0].partitions[3].high_watermark (byte 123)

    Attributes
    ----------
    reason : str
        What is wrong, without the location.
    path : str
        Where the bad field is, e.g. ``$.topics[0].partitions[3].records``.
    position : int
        Byte offset in the input where the bad field starts (``-1`` when
        encoding).
    """

    def __init__(self, reason: str, position: int = -1, path: str = "") -> None:
        KBatchError.__init__(self, reason, position, field=path)
        self.path = path
        message = reason
        if path:
            message += f" - at {path}"
        if position >= 0:
            message += f" (byte {position})"
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.reason, self.position, self.path))
