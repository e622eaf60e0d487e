"""The kbatch exception hierarchy.

Every error kbatch raises about its input derives from :class:`KBatchError`; the
ones about malformed bytes also derive from :class:`ValueError`, so code that
already catches ``ValueError`` keeps working.

``KBatchError``
    ``CorruptRecordError`` (also ``ValueError``): the bytes break the format.
        ``CRCError``: a stored checksum does not match the bytes.
    ``UnsupportedError`` (also ``ValueError``): well-formed, but a feature
    kbatch does not read (yet).
    ``StorageError`` (also ``ValueError``): a file or object cannot be listed or read
    (missing, permission denied, shorter than listed); ``.url`` names it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self

__all__ = ["KBatchError", "CorruptRecordError", "CRCError", "StorageError", "UnsupportedError"]


class KBatchError(Exception):
    """Root of every exception kbatch raises about data.

    Every instance says where the problem is when that is known.

    Attributes
    ----------
    reason : str
        What is wrong, without the location.
    position : int
        Byte offset in the input buffer where the bad field starts.
    batch_index : int
        Index of the batch (outer entry) holding the bad field, counted from 0.
    batch_position : int
        Byte offset of that batch in the input buffer.
    field : str
        Name of the field that could not be read, in Kafka's spelling.
    record_index : int
        Index of the record inside the batch, or -1 for a batch-level field.
    partial : RecordTable or None
        For errors raised by ``kbatch.decode``: everything decoded before the
        bad batch, so valid data is not lost.
    """

    def __init__(
        self,
        reason: str,
        position: int = -1,
        batch_index: int = -1,
        field: str = "",
        *,
        batch_position: int = -1,
        record_index: int = -1,
    ) -> None:
        self.reason = reason
        self.position = position
        self.batch_index = batch_index
        self.batch_position = batch_position
        self.field = field
        self.record_index = record_index
        self.partial: object = None
        super().__init__(self._message())

    def _message(self) -> str:
        """The message: the reason, then where (subclasses that say where differently override it)."""
        where = [f"byte {self.position}"] if self.position >= 0 else []
        if self.batch_index >= 0:
            where.append(f"batch {self.batch_index}")
        if self.record_index >= 0:
            where.append(f"record {self.record_index}")
        if self.field:
            where.append(f"field {self.field}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def with_context(self, path: str | os.PathLike[str] | None = None, *, shift: int = 0) -> Self:
        """A copy of this error placed in a file: ``path`` named, positions counted from the file's start.

        The one way kbatch re-raises an error with more context (``raise exc.with_context(path)
        from exc``): the copy is of the same class and keeps every attribute (a
        :class:`CRCError`'s ``stored`` and ``computed``, ``partial``, ``batch_index``, a
        subclass's own), so it reads as the error the same bytes give anywhere else.

        Parameters
        ----------
        path : str or path-like, optional
            The file the bytes came from: the reason gets `` in <path>`` and the copy a
            ``path`` attribute.
        shift : int, default 0
            Where the decoded bytes start in that file: added to ``position`` and
            ``batch_position`` (those that are known, ``>= 0``).

        Returns
        -------
        KBatchError
            The copy; this error is left as it is.
        """
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        if path is not None:
            new.reason = f"{self.reason} in {os.fspath(path)}"
            new.path = os.fspath(path)  # type: ignore[attr-defined]
        if shift:
            if new.position >= 0:
                new.position += shift
            if new.batch_position >= 0:
                new.batch_position += shift
        new.args = (new._message(),)
        return new

    def __reduce__(self) -> tuple[Any, ...]:  # keep pickling (multiprocessing, Spark) lossless
        return (
            _rebuild,
            (type(self), self.reason, self.position, self.batch_index, self.field,
             self.batch_position, self.record_index, dict(self.__dict__)),
        )


def _rebuild(
    cls: type[KBatchError], reason: str, position: int, batch_index: int, field: str,
    batch_position: int, record_index: int, state: dict[str, Any],
) -> KBatchError:
    err = cls.__new__(cls)
    KBatchError.__init__(
        err, reason, position, batch_index, field,
        batch_position=batch_position, record_index=record_index,
    )
    err.__dict__.update(state)
    return err


class CorruptRecordError(KBatchError, ValueError):
    """The input is not a valid Kafka record buffer."""


class CRCError(CorruptRecordError):
    """A batch's stored checksum does not match its bytes.

    Attributes
    ----------
    stored : int
        The CRC written in the batch.
    computed : int
        The CRC of the bytes as they are.
    """

    stored: int
    computed: int


class UnsupportedError(KBatchError, ValueError):
    """Well-formed input that uses a feature kbatch cannot read."""


class StorageError(KBatchError, ValueError):
    """A file or object cannot be listed or read as it was listed.

    Attributes
    ----------
    url : str
        The object (or directory, bucket, prefix) concerned.
    """

    def __init__(self, reason: str, position: int = -1, *, url: str = "") -> None:
        super().__init__(reason, position)
        self.url = url
