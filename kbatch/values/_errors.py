"""The exceptions of typed values: a value that does not decode, and a registry that cannot answer."""

from __future__ import annotations

from typing import Any

from kbatch.errors import KBatchError

__all__ = ["RegistryError", "SchemaNotFoundError", "ValueDecodeError"]


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
        KBatchError.__init__(self, reason, position, field=path)
        self.offset = offset
        self.partition = partition
        self.topic = topic
        self.schema_id = schema_id
        self.path = path
        where = []
        if topic:
            where.append(f"topic {topic}")
        if partition >= 0:
            where.append(f"partition {partition}")
        if offset >= 0:
            where.append(f"offset {offset}")
        if schema_id >= 0:
            where.append(f"schema id {schema_id}")
        if position >= 0:
            where.append(f"byte {position}")
        message = reason + (f" - at {path}" if path else "")
        self.args = (message + (f" ({', '.join(where)})" if where else ""),)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_decode, (type(self), self.reason, self.offset, self.partition, self.topic,
                                  self.schema_id, self.path, self.position))


def _rebuild_decode(cls: type[ValueDecodeError], reason: str, offset: int, partition: int, topic: str,
                    schema_id: int, path: str, position: int) -> ValueDecodeError:
    return cls(reason, offset=offset, partition=partition, topic=topic, schema_id=schema_id, path=path,
               position=position)


class RegistryError(KBatchError, ValueError):
    """A schema registry that cannot answer: a REST call that failed after its retries, a
    ``_schemas`` topic that is not there, a schema file that cannot be read.

    Attributes
    ----------
    reason : str
        What is wrong.
    url : str
        The request (or the root, the file) concerned; ``""`` when none.
    status : int
        The HTTP status of the last answer; ``-1`` when there was none (connection refused,
        timed out) or no HTTP was involved.
    """

    def __init__(self, reason: str, *, url: str = "", status: int = -1) -> None:
        KBatchError.__init__(self, reason)
        self.url = url
        self.status = status
        where = []
        if status >= 0:
            where.append(f"HTTP {status}")
        if url:
            where.append(url)
        self.args = (reason + (f" ({', '.join(where)})" if where else ""),)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_registry, (type(self), self.reason, self.url, self.status))


def _rebuild_registry(cls: type[RegistryError], reason: str, url: str, status: int) -> RegistryError:
    return cls(reason, url=url, status=status)


class SchemaNotFoundError(RegistryError):
    """The registry has no schema for this id, GUID, subject or version.

    Attributes
    ----------
    url : str
        The REST request that answered 404, or ``""`` for a local registry.
    status : int
        404 from a REST registry, ``-1`` for a local one.
    """


for _cls in (ValueDecodeError, RegistryError, SchemaNotFoundError):
    _cls.__module__ = "kbatch.values"  # where users import them from (tracebacks name them so)
