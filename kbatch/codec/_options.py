"""Argument normalisation shared by :func:`kbatch.encode`, :func:`kbatch.arrow.encode_arrow`
and :class:`kbatch.BatchBuilder`.

>>> from kbatch._wire import CODEC_IDS
>>> code("compression", "ZSTD", CODEC_IDS), code("compression", None, CODEC_IDS)
(4, 0)
>>> codec_id("lz4"), timestamp_type_id("log_append")
(3, 1)
"""

from __future__ import annotations

from typing import Any

from kbatch._wire import CODEC_IDS, TIMESTAMP_TYPES

__all__ = ["check_out", "code", "codec_id", "timestamp_type_id"]


def code(name: str, value: str | int | None, table: dict[str, int]) -> int:
    """The id of ``value`` in ``table`` (a name, any case, or an id it holds; None: 0).

    Raises ValueError naming the argument and the accepted names otherwise.
    """
    if value is None:
        return 0
    if isinstance(value, int) and value in table.values():
        return value
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    raise ValueError(f"{name} must be one of {sorted(table)}, got {value!r}")


def codec_id(compression: str | int | None) -> int:
    """The codec id of a ``compression`` argument (:func:`code` over :data:`kbatch._wire.CODEC_IDS`)."""
    return code("compression", compression, CODEC_IDS)


def timestamp_type_id(timestamp_type: str | int | None) -> int:
    """The id of a ``timestamp_type`` argument (:func:`code` over :data:`kbatch._wire.TIMESTAMP_TYPES`)."""
    return code("timestamp_type", timestamp_type, TIMESTAMP_TYPES)


def check_out(out: Any) -> None:
    """``out`` is a writable C-contiguous buffer, or a TypeError/ValueError saying what it is.

    >>> check_out(bytearray(4))
    >>> check_out(b"ab")
    Traceback (most recent call last):
    ...
    TypeError: out must be writable, and this bytes is read-only
    """
    try:
        view = memoryview(out)
    except TypeError:
        raise TypeError(
            f"out must be a writable buffer (bytearray, mmap, NumPy array), got {type(out).__name__}"
        ) from None
    with view:
        if view.readonly:
            raise TypeError(f"out must be writable, and this {type(out).__name__} is read-only")
        if not view.c_contiguous:
            raise ValueError("out must be C-contiguous")
