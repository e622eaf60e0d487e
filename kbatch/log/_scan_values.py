"""What a lazy scan's ``values=`` / ``keys=`` take, and the one topic they decode.

The log layer sits below :mod:`kbatch.values` and never imports it: a scan calls the registry
object it is given (:meth:`kbatch.values.Registry.scan_values`), as ``RecordTable.to_arrow(values=
registry)`` calls its ``records_to_arrow``. The registry answers with a :class:`TopicValues`:
the columns the scan gives (the decoded ones typed, known before any record is read) and the
decode of each batch read.

One scan decodes one topic: a topic's reader schema is the latest version of its subject
(``<topic>-value``), so two topics would give two struct types for one column. A scan over
several topics with ``values=`` is refused with the topics named: scan one topic's logs at a
time (:func:`kbatch.polars.scan_kafka_log`'s ``topic=`` chooses them in a root).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from kbatch.codec import RecordTable

__all__ = ["ScanDecoder", "TopicValues", "ValueFilter", "value_scan"]


class ValueFilter(Protocol):
    """A filter on value fields, judged on the values decoded with only :attr:`fields` (the
    rows it rules out are not decoded further): what :func:`kbatch.polars.scan_kafka_log` makes
    of a query's predicate. It must keep every row the query's whole filter keeps (it may keep
    more: the scan's caller filters the rows given back again)."""

    #: the top-level value fields it reads
    fields: Sequence[str]
    #: the scan's other columns it reads (raw ones: ``offset``, ``partition``, ...)
    columns: Sequence[str]

    def __call__(self, table: Any) -> Any:
        """A boolean per row of ``table`` (a ``pyarrow.Table``: the rows' raw :attr:`columns` and
        the ``value`` struct of :attr:`fields`, ``value_schema_id``): whether it may be kept."""
        ...


class TopicValues(Protocol):
    """One topic's typed values in a scan (:class:`kbatch.values._scan.ScanValues`)."""

    #: every column the scan can give (a ``pyarrow.Schema``), the decoded ones typed
    schema: Any

    def decoded(self, columns: Collection[str]) -> tuple[str, ...]:
        """The raw columns (``"key"``, ``"value"``) to decode for the output ``columns``."""
        ...

    def decode(self, table: RecordTable, base: Any, columns: Sequence[str]) -> Any:
        """The output ``columns`` of ``table`` (its other columns in ``base``, a ``pyarrow.Table``)."""
        ...

    def judge(self, table: RecordTable, base: Any, columns: Sequence[str], where: ValueFilter) -> Any:
        """The rows of ``table`` that ``where`` keeps (a NumPy boolean mask), judged on a decode of its
        fields alone, or None when every row is to be decoded whole."""
        ...


class ScanDecoder(Protocol):
    """What a scan's ``values=`` / ``keys=`` take: a :class:`kbatch.values.Registry`."""

    def scan_values(self, topic: str, source: Any, values: Any = None, keys: Any = None, *,
                    errors: str = "raise", fields: Sequence[str] | None = None) -> TopicValues: ...


def value_scan(topics: Collection[str], source: Any, values: ScanDecoder | None, keys: ScanDecoder | None,
               errors: str, fields: Sequence[str] | None = None) -> TopicValues | None:
    """The typed values of a scan of ``topics`` whose raw columns are ``source`` (a
    ``pyarrow.Schema``), or None when neither ``values`` nor ``keys`` is given; ``fields``: only
    these fields of the values.

    Raises
    ------
    TypeError
        ``values`` / ``keys`` is not a registry (``"auto"`` included: the log layer has no
        registry of its own to find).
    ValueError
        ``errors`` is not ``"raise"`` or ``"null"`` (or ``"null"`` with nothing to decode); the
        scan is not of exactly one topic.
    """
    if errors not in ("raise", "null"):
        raise ValueError(f"errors must be 'raise' or 'null', got {errors!r}")
    if fields is not None and values is None:
        raise ValueError("fields= projects the decoded values: give values= too")
    if values is None and keys is None:
        if errors != "raise":
            raise ValueError("errors='null' is for the typed values of values= or keys=")
        return None
    for name, given in (("values", values), ("keys", keys)):
        if given is None:
            continue
        if isinstance(given, str):
            raise TypeError(f"{name}={given!r}: a scan of LogDirs takes a kbatch.values.Registry "
                            f"(Registry.from_log_dirs(root) is the root's own _schemas); 'auto' is "
                            f"kbatch.polars.scan_kafka_log's and kbatch.duckdb.register's")
        if not callable(getattr(given, "scan_values", None)):
            raise TypeError(f"{name} must be a kbatch.values.Registry, got {type(given).__name__}")
    names = sorted(set(topics))
    if len(names) != 1:
        raise ValueError(f"values= and keys= decode one topic per scan (each topic's reader schema is its "
                         f"subject's latest version); this scan reads "
                         f"{', '.join(names) if names else 'no topic'}: scan one topic's logs at a time")
    decoder = values if values is not None else keys
    assert decoder is not None
    if fields is None:
        return decoder.scan_values(names[0], source, values, keys, errors=errors)
    return decoder.scan_values(names[0], source, values, keys, errors=errors, fields=fields)
