"""Avro values: schemas parsed, laid out as columns, compiled per (writer, reader) pair, verified
and run by the Avro kernel.

An internal face (not part of :mod:`kbatch.values`' public surface): what the rest of
``kbatch.values`` takes from Avro, each name listed in ``__all__``.

- ``_schema.py``: Avro schema JSON (1.12) into :class:`AvroType` nodes (:func:`parse_avro_schema`).
- ``_layout.py``: a reader schema's output columns (:class:`Layout`, :class:`Column`) and their
  Arrow types under Spark's mapping or Arrow's own; the column kinds (``NULLT`` ... ``STRUCT``)
  and :data:`MAX_RECURSION_DEPTH`.
- ``_project.py``: a reader schema cut to the fields a decode keeps (:func:`project_avro`).
- ``_compile.py``: :class:`AvroProgram`, the programs of every writer met for one reader.
- ``_verify.py``: ``verify_avro``, the checks every program passes before the kernel runs it.
- ``_avrokernel.pyx``: the machine (:func:`run`, its ``OPS`` and ``ERRORS``) and the registry
  frames' C loop (:func:`read_frames`).
"""

from __future__ import annotations

from ._avrokernel import ERRORS, OPS, read_frames, run
from ._compile import AvroProgram
from ._layout import BIN, BOOL, FIXEDW, LIST, MAX_RECURSION_DEPTH, NULLT, STRUCT, Column, Layout
from ._project import project_avro
from ._schema import parse_avro_schema

__all__ = [
    "BIN",
    "BOOL",
    "ERRORS",
    "FIXEDW",
    "LIST",
    "MAX_RECURSION_DEPTH",
    "NULLT",
    "OPS",
    "STRUCT",
    "AvroProgram",
    "Column",
    "Layout",
    "parse_avro_schema",
    "project_avro",
    "read_frames",
    "run",
]
