"""Argument normalisation shared by :func:`kbatch.encode`, :func:`kbatch.arrow.encode_arrow`
and :class:`kbatch.BatchBuilder`.

>>> from kbatch._wire import CODEC_IDS
>>> code("compression", "ZSTD", CODEC_IDS), code("compression", None, CODEC_IDS)
(4, 0)
"""

from __future__ import annotations

__all__ = ["code"]


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
