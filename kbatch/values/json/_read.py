"""``pyarrow.json.read_json`` behind the one guard both JSON paths need.

pyarrow's reader (26.x) crashes the process on a text whose first value is the literal ``null``
(``null``, `` null``, ``nullx``...): :func:`read_json` refuses such a text with
:class:`pyarrow.ArrowInvalid` instead, the error the reader gives for any other value that is not
a JSON object. Decoding (:mod:`._decode`) and inference (:mod:`._infer`) both read
through it, so no text reaches the reader unguarded.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.json as pj

__all__ = ["NULL_VALUE", "read_json"]

#: The reason given for a value that is the JSON literal ``null``.
NULL_VALUE = "a JSON null: not a JSON object"
_SPACE = frozenset(b" \t\r\n")


def read_json(text: bytes | pa.Buffer, read_options: pj.ReadOptions,
              parse_options: pj.ParseOptions | None = None) -> pa.Table:
    """``pyarrow.json.read_json`` of the newline-delimited ``text``.

    Raises
    ------
    pyarrow.ArrowInvalid
        The text does not parse, or its first value starts with ``null``.
    """
    view = memoryview(text).cast("B")
    k = 0
    while k < len(view) and view[k] in _SPACE:
        k += 1
    if bytes(view[k:k + 4]) == b"null":
        raise pa.ArrowInvalid(NULL_VALUE)
    source: Any = pa.BufferReader(text if isinstance(text, pa.Buffer) else pa.py_buffer(text))
    return pj.read_json(source, read_options=read_options, parse_options=parse_options)
