"""Avro reader schemas evolved from a writer schema by the changes the spec's resolution allows,
for differential tests and the evolution fuzz harness (``fuzz/fuzz_avro_evolution.py``).

:func:`evolve` walks a copy of the writer (every record at every depth, through unions, arrays
and maps) and, at random: promotes ``int -> long -> float -> double`` and ``string -> bytes``,
makes a field optional, removes a field, adds a field with a default, reverses a record's
fields, adds an enum symbol. With ``wide=True`` it also: promotes ``bytes -> string``
(fastavro then fails on bytes that are not UTF-8, as a reader must), removes enum symbols
behind an enum default, adds union branches and reorders them, renames fields and records
behind aliases of their old names. :func:`optional_collection` and :func:`make_recursive`
give writers the shapes evolution is hardest on: an optional array or map of records, and a
record holding itself.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from .avro_random import Names, random_schema

__all__ = ["evolve", "make_recursive", "optional_collection", "recursive_field"]

_PROMOTIONS = {"int": ["long", "float", "double"], "long": ["float", "double"], "float": ["double"],
               "string": ["bytes"]}
_NUMERIC = {"int", "long", "float", "double"}
_PRIMITIVES = {"null", "boolean", "bytes", "string", *_NUMERIC}


def _promote(t: Any, rng: random.Random, wide: bool) -> Any:
    choices = _PROMOTIONS.get(t, []) if isinstance(t, str) else []
    if wide and t == "bytes":
        choices = ["string"]
    return rng.choice(choices) if choices else None


def _default_field(rng: random.Random, i: int) -> dict[str, Any]:
    return rng.choice([
        {"name": f"new{i}", "type": "long", "default": -7},
        {"name": f"new{i}", "type": ["null", "string"], "default": None},
        {"name": f"new{i}", "type": "string", "default": "déf"},
        {"name": f"new{i}", "type": "bytes", "default": "\u00ff\u0000"},
        {"name": f"new{i}", "type": "double", "default": 1.5},
        {"name": f"new{i}", "type": "boolean", "default": True},
        {"name": f"new{i}", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
        {"name": f"new{i}", "type": {"type": "map", "values": "string"}, "default": {"a": "b"}},
        {"name": f"new{i}", "type": {"type": "enum", "name": f"x.NewE{i}", "symbols": ["P", "Q"]}, "default": "Q"},
        {"name": f"new{i}", "type": {"type": "record", "name": f"x.NewR{i}", "fields": [
            {"name": "a", "type": "int", "default": 3}, {"name": "b", "type": ["string", "null"]}]},
         "default": {"a": 4, "b": "z"}},
        {"name": f"new{i}", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1000},
    ])


def _kind(t: Any) -> str:
    return t if isinstance(t, str) else "union" if isinstance(t, list) else str(t["type"])


def _evolve_union(branches: list[Any], rng: random.Random) -> None:
    """Add a branch no writer branch resolves to ambiguously, and/or reorder the branches (not
    in a union holding a reference to a named type: ``max_depth`` cuts a recursive one)."""
    if any(isinstance(b, str) and b not in _PRIMITIVES for b in branches):
        return
    kinds = {_kind(b) for b in branches}
    extra = [k for k in ("null", "boolean", "string") if k not in kinds
             and not (k == "string" and kinds & {"bytes", "enum"}) and not (k == "boolean" and kinds & _NUMERIC)]
    if extra and len(kinds & _NUMERIC) < 2 and rng.random() < 0.5:  # which number a writer wrote is unknown
        branches.insert(rng.randint(0, len(branches)), rng.choice(extra))
    if rng.random() < 0.5 and '"name"' not in json.dumps(branches):  # no reference before its type
        rng.shuffle(branches)


def _referenced(full: str, schema: Any) -> bool:
    """Whether ``full`` is used by name (a reference) anywhere in ``schema``."""
    return f'"{full}"' in json.dumps(schema)


def evolve(writer: Any, rng: random.Random, *, wide: bool = False) -> Any:
    """A reader schema made from ``writer`` by changes the spec's resolution allows (see the module)."""
    reader = copy.deepcopy(writer)
    counter = [0]

    def walk(t: Any, ns: str | None) -> None:
        if isinstance(t, list):
            for b in t:
                walk(b, ns)
            if wide and rng.random() < 0.3:
                _evolve_union(t, rng)
            return
        if not isinstance(t, dict):
            return
        if t["type"] == "record":
            ns = t.get("namespace", ns)
            fields = t["fields"]
            for f in fields:
                walk(f["type"], ns)
                r = rng.random()
                promoted = _promote(f["type"], rng, wide)
                if promoted and r < 0.3:
                    f["type"] = promoted
                elif r < 0.4 and isinstance(f["type"], (str, dict)) and f["type"] != "null" \
                        and not (isinstance(f["type"], dict) and f["type"].get("logicalType")):
                    f["type"] = ["null", f["type"]]
                elif wide and r < 0.5:
                    f["aliases"] = [f["name"]]
                    f["name"] += "_r"
            if len(fields) > 1 and rng.random() < 0.3:
                k = rng.randrange(len(fields))
                if '"name"' not in json.dumps(fields[k]["type"]):  # it defines no type used later
                    del fields[k]
            if rng.random() < 0.4:
                counter[0] += 1
                fields.insert(rng.randint(0, len(fields)), _default_field(rng, counter[0]))
            if rng.random() < 0.3 and '"name"' not in json.dumps(fields):  # no reference before its type
                fields.reverse()
            full = f"{ns}.{t['name']}" if ns and "." not in t["name"] else t["name"]
            if wide and rng.random() < 0.2 and not _referenced(full, reader):
                t["aliases"] = [full]
                t["name"] += "R"
        elif t["type"] == "enum" and rng.random() < 0.5:
            if wide and len(t["symbols"]) > 1 and rng.random() < 0.5:
                t["symbols"] = t["symbols"][:-1]
                t["default"] = t["symbols"][0]
            else:
                t["symbols"] = [*t["symbols"], "EXTRA"]
        elif t["type"] == "array":
            walk(t["items"], ns)
        elif t["type"] == "map":
            walk(t["values"], ns)

    walk(reader, None)
    return reader


def optional_collection(record: dict[str, Any], rng: random.Random, depth: int = 2) -> None:
    """Add to ``record`` a field ``["null", array or map of a random record]`` (item 1 of issue 34:
    the shape where a reader's record adding a field with a default broke the compiler). Its types
    are new (``N1001``...) and refer to none of ``record``'s, so it adds no recursion."""
    names = Names()
    names.count = 1000
    items = random_schema(rng, depth, names)
    kind = rng.choice(["array", "map"])
    field = {"type": kind, "items" if kind == "array" else "values": items}
    # last: its record may refer to types the other fields define
    record["fields"].append({"name": "opt", "type": ["null", field] if rng.random() < 0.8 else [field, "null"]})


def make_recursive(record: dict[str, Any]) -> None:
    """Add to the top-level ``record`` a field ``rec: ["null", <itself>]`` (a linked list)."""
    ns = record.get("namespace")
    full = f"{ns}.{record['name']}" if ns else record["name"]
    record["fields"].append({"name": "rec", "type": ["null", full]})


def recursive_field(reader: dict[str, Any]) -> str | None:
    """The name of the top-level record's field that holds the record itself (``make_recursive``'s,
    perhaps renamed), or None when the reader dropped it."""
    return next((f["name"] for f in reader["fields"] if f["name"] in ("rec", "rec_r")), None)
