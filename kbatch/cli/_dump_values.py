"""``kbatch dump --value-decoder avro|json|protobuf`` (and ``--key-decoder``): registry-framed Avro
(JSON Schema, Protobuf) keys and values printed as JSON, one per record, where Kafka's tool prints
``key:`` / ``payload:``. Protobuf values are laid out as Spark's ``from_protobuf`` lays them out
(enums as names, absent fields null, maps as objects). With ``json``, the values are parsed and
typed by their JSON Schema (``format="json"``: fields outside the schema dropped, a value of the
wrong type an error) before they are printed.

Each chunk of records :mod:`kbatch.cli._dump` decodes is decoded again by :func:`kbatch.values.decode`
(``errors="null"``, Spark's type mapping, the reader schema ``--reader-schema`` or the subject's
latest), then each value is written as compact JSON: records as objects, maps as objects, decimals
as strings (no precision lost), bytes and fixed as ``--json-binary`` says (base64 by default),
timestamps, dates and times in ISO 8601 (UTC timestamps with ``+00:00``, local ones without), NaN
and infinities as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``. A value that does not
decode shows ``Error: <its one-line error>`` in its place; dump goes on, counts them per file at
the end and exits 1.

The registry: ``--registry URL|PATH`` (a REST URL, a ``log.dirs`` root or backup holding the
registry's ``_schemas`` topic, or a directory of schema files); by default the ``_schemas``
topic of the root the dumped partition directory is in (``<root>/<topic>-<n>/<segment>.log``).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import os
from pathlib import Path
from typing import Any

from kbatch.codec import RecordTable
from kbatch.errors import KBatchError
from kbatch.values import (
    AvroSchemaError,
    JsonSchemaError,
    ProtobufSchemaError,
    Registry,
    RegistryError,
    Schema,
    SchemaNotFoundError,
    decode,
    frames,
)

__all__ = ["AvroDecoder", "AvroText", "to_json"]


class AvroText:
    """One decoded key or value: its JSON text and JSON-ready value, or why it did not decode."""

    __slots__ = ("error", "kind", "text", "value")

    def __init__(self, value: Any = None, error: str | None = None, binary: str = "base64",
                 kind: str = "avro") -> None:
        self.error = error
        #: the decoder that read it ("avro", "json"): --json's payload_encoding
        self.kind = kind
        self.value = None if error is not None else to_json(value, binary)
        self.text = f"Error: {error}" if error is not None else json.dumps(
            self.value, separators=(",", ":"), ensure_ascii=False)


def to_json(v: Any, binary: str = "base64") -> Any:
    """A decoded value (``to_pylist``'s Python objects) as plain JSON values.

    >>> import datetime, decimal
    >>> to_json({"a": decimal.Decimal("1.50"), "b": [("k", b"\\x00")], "c": float("nan"),
    ...          "t": datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)})
    {'a': '1.50', 'b': {'k': 'AA=='}, 'c': 'NaN', 't': '2026-01-02T00:00:00+00:00'}
    """
    if isinstance(v, dict):
        return {k: to_json(x, binary) for k, x in v.items()}
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):  # a map's (key, value) pairs
            return {str(k): to_json(x, binary) for k, x in v}
        return [to_json(x, binary) for x in v]
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex() if binary == "hex" else base64.b64encode(v).decode("ascii")
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


class AvroDecoder:
    """The ``avro`` decoders of one ``kbatch dump`` run: the registry (one per root when found
    beside the dumped files), the reader schema, and the decoding of a chunk of records."""

    def __init__(self, keys: bool, values: bool, registry: str | None, reader_schema: str | None,
                 binary: str = "base64", formats: dict[str, str | None] | None = None) -> None:
        #: column -> "avro", "json" or "protobuf" (the language its decoder reads)
        self.formats = {c: (formats or {}).get(c) or "avro" for c in ("key", "value")}
        self.keys = keys
        self.values = values
        self.binary = binary
        self._reader_text = reader_schema
        self._registries: dict[str, Registry | str] = {}
        self._given = registry

    def registry_for(self, path: Path) -> Registry | str:
        """The registry for a dumped file, or why there is none (a message)."""
        if self._given is not None:
            where = self._given
        else:
            location = getattr(path, "location", None)
            if location is not None:
                return "a remote file: give --registry URL|PATH"
            where = str(Path(path).absolute().parent.parent)
        found = self._registries.get(where)
        if found is None:
            found = self._registries[where] = _open(where, given=self._given is not None)
        return found

    def _reader(self, registry: Registry) -> Schema | None:
        text = self._reader_text
        if text is None:
            return None
        if text.strip().isdigit():
            return registry.schema(int(text))
        kind = {"json": "JSON", "protobuf": "PROTOBUF"}.get(str(self.formats["value"]), "AVRO")
        if os.path.isfile(text):
            return Schema(Path(text).read_text(), kind)
        return Schema(text, kind)

    def decode(self, table: RecordTable, path: Path) -> tuple[str | None, dict[str, list[Any]]]:
        """Every record's key and/or value as :class:`AvroText` (None for a null one), by
        column; and a problem with the whole chunk (no registry) to report once, or None."""
        registry = self.registry_for(path)
        out: dict[str, list[Any]] = {}
        raw = {"key": table.keys(), "value": table.values()}
        problem = None
        for column in [c for c, on in (("key", self.keys), ("value", self.values)) if on]:
            how = self.formats[column]
            if isinstance(registry, str):
                problem = f"--{column}-decoder {how}: {registry}"
                out[column] = [None if b is None else AvroText(error="no schema registry") for b in raw[column]]
                continue
            try:
                reader = self._reader(registry) if column == "value" else None
                done = decode(table, registry, column, reader, errors="null", format=how)
            except RegistryError as exc:  # the registry itself failed (unreachable, refused)
                if isinstance(exc, SchemaNotFoundError):
                    out[column] = self._framing_errors(table, column, str(exc), raw[column])
                    continue
                problem = f"--{column}-decoder {how}: {exc}"
                out[column] = [None if b is None else AvroText(error=f"schema registry: {exc}") for b in raw[column]]
                continue
            except (AvroSchemaError, JsonSchemaError, ProtobufSchemaError, ValueError) as exc:
                # no writer schema in the chunk at all, or its schemas are of another language
                out[column] = self._framing_errors(table, column, str(exc), raw[column])
                continue
            decoded = done.column(column).to_pylist()
            errors = done.column(f"{column}_error").to_pylist()
            out[column] = [None if b is None else AvroText(error=e) if e is not None else
                           AvroText(decoded[i], binary=self.binary, kind=how)
                           for i, (b, e) in enumerate(zip(raw[column], errors, strict=True))]
        return problem, out

    @staticmethod
    def _framing_errors(table: RecordTable, column: str, why: str, raw: list[Any]) -> list[Any]:
        f = frames(table, column=column)
        offsets = table.records["offset"].tolist()
        texts: list[Any] = []
        for i, b in enumerate(raw):
            if b is None:
                texts.append(None)
            elif f.error[i]:
                texts.append(AvroText(error=str(f.error_at(i, offset=offsets[i]))))
            else:
                texts.append(AvroText(error=why))
        return texts


def _open(where: str, *, given: bool) -> Registry | str:
    """``--registry``'s registry (a URL, a root with ``_schemas``, a schema directory), or why not."""
    if where.startswith(("http://", "https://")):
        return Registry(where)
    try:
        return Registry.from_log_dirs(where)
    except (RegistryError, FileNotFoundError, KBatchError) as exc:
        if not given:
            return f"no --registry given and no _schemas topic in {where} ({exc})"
    if not os.path.isdir(where):
        return f"--registry {where}: not a URL, a log.dirs root with a _schemas topic, nor a directory"
    try:
        return Registry.from_directory(where)
    except RegistryError as exc:
        return f"--registry {where}: {exc}"
