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
    ``ReplicasDisagreeError`` (also ``ValueError``): two copies of one log (same cluster,
    same topic id) hold different batches at the same offset.
    ``LayoutError`` (also ``ValueError``): files are not where, or not named as, a broker
    lays them out (a ``log.dirs`` root given for a partition directory, logs only deeper
    than searched, ``.log`` files not named as segments); ``.url`` names the path given.
    ``ValueDecodeError`` (also ``ValueError``): a record's key or value that does not decode
    with its schema (:mod:`kbatch.values`); names the offset, schema id, field path and byte.
    ``TableError`` (also ``ValueError``): a table (:mod:`kbatch.tables`) cannot take a commit.
        ``CommitConflictError``: another run committed to the table since this one read it.
        ``OffsetGapError``: retention deleted offsets no run converted (``.gaps``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self

__all__ = ["KBatchError", "CommitConflictError", "CorruptRecordError", "CRCError", "LayoutError", "OffsetGapError",
           "ReplicasDisagreeError", "StorageError", "TableError", "UnsupportedError", "ValueDecodeError"]


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


class ReplicasDisagreeError(KBatchError, ValueError):
    """Two replicas of one partition (same cluster id, same topic id) hold different batches
    (base offset or CRC) at an offset both hold: reading either alone could lose records.

    Attributes
    ----------
    topic : str
    partition : int
    offset : int
        The first offset where the copies part.
    urls : tuple of str
        The two partition directories.
    """

    def __init__(self, reason: str, *, topic: str = "", partition: int = -1, offset: int = -1,
                 urls: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.urls = urls


class LayoutError(KBatchError, ValueError):
    """Files are not where, or not named as, a broker lays them out, so reading would give nothing.

    Raised instead of an empty result: a ``log.dirs`` root opened as one partition directory
    (or the reverse), a folder whose Kafka logs are only deeper than the search went, ``.log``
    files not named as segments. The message says what was found and what to call instead.

    Attributes
    ----------
    url : str
        The path (or URL) given.
    deeper : list of str
        Folders below ``url`` that hold partition directories (the first few), when that
        is what was found: a recursive search reads them.
    """

    def __init__(self, reason: str, *, url: str = "", deeper: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.url = url
        self.deeper = list(deeper)


class ValueDecodeError(KBatchError, ValueError):
    """A record's key or value that cannot be decoded with its schema.

    The message says what is wrong and where, in the style of msgspec::

        value has no schema frame: magic byte 0x7b, expected 0x00 or 0x01
        - at value (offset 42, partition 3, byte 0)

    Attributes
    ----------
    reason : str
        What is wrong, without the location.
    offset : int
        The record's offset in its partition (``-1`` when not known).
    partition : int
        The record's partition (``-1`` when not known).
    topic : str
        The record's topic (``""`` when not known).
    schema_id : int
        The writer schema's id (``-1`` when the value carries none, or it could not be read).
    path : str
        Where in the value the bad field is: ``value``, ``value.items[2].price``; ``key...`` for keys.
    position : int
        Byte position inside the key or value (the whole value, frame included) where the
        problem starts; ``-1`` when not known.
    """

    def __init__(
        self,
        reason: str,
        *,
        offset: int = -1,
        partition: int = -1,
        topic: str = "",
        schema_id: int = -1,
        path: str = "value",
        position: int = -1,
    ) -> None:
        self.offset = offset
        self.partition = partition
        self.topic = topic
        self.schema_id = schema_id
        #: where in the value: ``value.items[2].price`` (also ``field``)
        self.path = path
        KBatchError.__init__(self, reason, position, field=path)

    def _message(self) -> str:
        where = []
        if self.topic:
            where.append(f"topic {self.topic}")
        if self.partition >= 0:
            where.append(f"partition {self.partition}")
        if self.offset >= 0:
            where.append(f"offset {self.offset}")
        if self.schema_id >= 0:
            where.append(f"schema id {self.schema_id}")
        if self.position >= 0:
            where.append(f"byte {self.position}")
        message = self.reason + (f" - at {self.path}" if self.path else "")
        return message + (f" ({', '.join(where)})" if where else "")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_decode, (type(self), self.reason, self.offset, self.partition, self.topic,
                                  self.schema_id, self.path, self.position))


def _rebuild_decode(cls: type[ValueDecodeError], reason: str, offset: int, partition: int, topic: str,
                    schema_id: int, path: str, position: int) -> ValueDecodeError:
    return cls(reason, offset=offset, partition=partition, topic=topic, schema_id=schema_id, path=path,
               position=position)


class TableError(KBatchError, ValueError):
    """A table (:mod:`kbatch.tables`) that cannot take this run's commit.

    Attributes
    ----------
    table : str
        The table (its identifier, or the folder of a Parquet table).
    """

    def __init__(self, reason: str, *, table: str = "") -> None:
        super().__init__(reason)
        self.table = table


class CommitConflictError(TableError):
    """Another run committed to the table after this one read its ledger: nothing of this run
    was committed (the catalog's optimistic concurrency); run again to convert what is left."""


class OffsetGapError(TableError):
    """Offsets after a table's last converted ones are gone from the log (retention moved the log
    start past them) and were never converted.

    Attributes
    ----------
    gaps : list of tuple
        ``(topic, partition, start, end)``: the offsets ``[start, end)`` lost, per partition.
    """

    def __init__(self, reason: str, *, table: str = "", gaps: Sequence[tuple[str, int, int, int]] = ()) -> None:
        super().__init__(reason, table=table)
        self.gaps = list(gaps)
