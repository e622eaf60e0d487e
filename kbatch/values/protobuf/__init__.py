"""Protobuf values: schemas compiled by grpcio-tools' protoc, messages compiled into programs for
the Protobuf kernel, verified, run, and the slow paths (merges, ``Any`` as JSON).

An internal face (not part of :mod:`kbatch.values`' public surface): what the rest of
``kbatch.values`` takes from Protobuf, each name listed in ``__all__``. The column layout is
Avro's (:class:`kbatch.values.avro.Layout`), taken through that face.

- ``_schema.py``: :class:`ProtoSchema`, :func:`compile_proto`, :func:`load_proto`; the bundled
  ``proto/`` files (Confluent's ``meta.proto`` and ``type/decimal.proto``) on protoc's path.
- ``_compile.py``: a message laid out as columns and compiled into the kernel's tables.
- ``_verify.py``: ``verify_proto``, the checks every program passes before the kernel runs it.
- ``_protokernel.pyx``: the tag-driven decoder and Confluent's message indexes.
- ``_decode.py``: :class:`ProtoOptions`, :func:`reader_layout`, :func:`run_protobuf` (what
  ``kbatch.values._decode`` calls).
- ``_merge.py``: the merge slow path's bytes (a singular message met twice written once).
- ``_any.py``: ``google.protobuf.Any`` fields rendered as JSON strings.
"""

from __future__ import annotations

from ._decode import ProtoOptions, reader_layout, run_protobuf
from ._schema import ProtoSchema, compile_proto, load_proto

__all__ = ["ProtoOptions", "ProtoSchema", "compile_proto", "load_proto", "reader_layout", "run_protobuf"]
