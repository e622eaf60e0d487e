"""Random Avro schemas and values for differential tests against fastavro.

Everything is driven by a ``random.Random`` (tests draw its seed with hypothesis). Schemas use
every type and logical type of Avro 1.12, nested to a given depth, with named types,
namespaces and references to names defined earlier; unions follow the spec (no two branches
of one kind or name) and, so that fastavro's writer picks the branch the value was made for,
never hold two branches a Python value cannot tell apart (int and long with anything else,
string and enum, bytes and fixed, record and map).

:func:`expected` turns a value (as fastavro reads it with logical types stripped) into what
kbatch's Spark mapping gives from ``pyarrow.Array.to_pylist``.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import io
import random
import struct
import uuid
from typing import Any

import fastavro

PRIMS = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
LOGICAL = [
    {"type": "int", "logicalType": "date"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "timestamp-nanos"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-nanos"},
    {"type": "string", "logicalType": "uuid"},
    "decimal-bytes",
    "decimal-fixed",
    "uuid-fixed",
    "duration",
]
UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
MIN_MS, MAX_MS = -62135596800000, 253402300799999  # years 1..9999


class Names:
    def __init__(self) -> None:
        self.count = 0
        self.defined: dict[str, Any] = {}

    def new(self, rng: random.Random) -> tuple[str, str | None]:
        self.count += 1
        namespace = rng.choice(["x", "a", "a.b"])
        return f"N{self.count}", namespace


def random_schema(rng: random.Random, depth: int = 3, names: Names | None = None) -> Any:
    """A random Avro schema (JSON) of nesting at most ``depth``; the top level is a record."""
    names = names or Names()
    return _record(rng, depth, names)


def _full(name: str, namespace: str | None) -> str:
    return f"{namespace}.{name}" if namespace else name


def _record(rng: random.Random, depth: int, names: Names) -> Any:
    name, ns = names.new(rng)
    fields = [{"name": f"f{i}", "type": _type(rng, depth - 1, names)} for i in range(rng.randint(1, 4))]
    out: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if ns:
        out["namespace"] = ns
    names.defined[_full(name, ns)] = out
    return out


def _leaf(rng: random.Random, names: Names) -> Any:
    if names.defined and rng.random() < 0.1:
        return rng.choice(sorted(names.defined))  # a reference to a type defined before
    r = rng.random()
    if r < 0.45:
        return rng.choice(PRIMS)
    if r < 0.8:
        choice = rng.choice(LOGICAL)
        if isinstance(choice, dict):
            return dict(choice)
        name = ".".join(names.new(rng)[::-1])
        if choice == "decimal-bytes":
            p = rng.randint(1, 38)
            return {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": rng.randint(0, p)}
        if choice == "decimal-fixed":
            size = rng.randint(2, 16)
            p = rng.randint(1, min(38, len(str(2 ** (8 * size - 1) - 1)) - 1))
            out = {"type": "fixed", "name": name, "size": size, "logicalType": "decimal", "precision": p,
                   "scale": rng.randint(0, p)}
        elif choice == "uuid-fixed":
            out = {"type": "fixed", "name": name, "size": 16, "logicalType": "uuid"}
        else:
            out = {"type": "fixed", "name": name, "size": 12, "logicalType": "duration"}
        names.defined[name] = out
        return out
    name = ".".join(names.new(rng)[::-1])
    if r < 0.9:
        out = {"type": "enum", "name": name, "symbols": [f"S{i}" for i in range(rng.randint(1, 5))]}
    else:
        out = {"type": "fixed", "name": name, "size": rng.randint(0, 6)}
    names.defined[name] = out
    return out


def _type(rng: random.Random, depth: int, names: Names) -> Any:
    if depth <= 0:
        return _leaf(rng, names)
    r = rng.random()
    if r < 0.4:
        return _leaf(rng, names)
    if r < 0.55:
        return _record(rng, depth, names)
    if r < 0.7:
        return {"type": "array", "items": _type(rng, depth - 1, names)}
    if r < 0.8:
        return {"type": "map", "values": _type(rng, depth - 1, names)}
    return _union(rng, depth, names)


def _kind(t: Any, names: Names) -> str:
    if isinstance(t, str):
        return _kind(names.defined[t], names) if t in names.defined else t
    if isinstance(t, list):
        return "union"
    return str(t["type"])


_NUMBERS = ("boolean", "int", "long", "float", "double")
_CLASH = [{"string", "enum"}, {"bytes", "fixed"}, {"record", "map"}, {"bytes", "string"}] + [
    {a, b} for a in _NUMBERS for b in _NUMBERS if a != b]


def _union(rng: random.Random, depth: int, names: Names) -> Any:
    shape = rng.random()
    if shape < 0.4:
        saved = dict(names.defined)
        t = _type(rng, depth - 1, names)
        while _kind(t, names) in ("union", "null"):
            names.defined.clear()
            names.defined.update(saved)  # what the discarded type defined is gone
            t = _leaf(rng, names)
        return ["null", t] if rng.random() < 0.7 else [t, "null"]
    if shape < 0.5:
        return rng.choice([["int", "long"], ["null", "float", "double"], ["long", "int", "null"]])
    branches: list[Any] = []
    kinds: set[str] = set()
    for _ in range(rng.randint(2, 4)):
        saved = dict(names.defined)
        t = _type(rng, depth - 1, names)
        k = _kind(t, names)
        if k == "union" or k in kinds or any(k in pair and kinds & (pair - {k}) for pair in _CLASH):
            names.defined.clear()
            names.defined.update(saved)  # what the discarded type defined is gone
            continue
        kinds.add(k)
        branches.append(t)
    if rng.random() < 0.5 and "null" not in kinds:
        branches.insert(rng.randint(0, len(branches)), "null")
    return branches or ["null"]


# ---------------------------------------------------------------- values

def resolve(t: Any, names: dict[str, Any]) -> Any:
    return names[t] if isinstance(t, str) and t in names else t


def all_names(schema: Any, out: dict[str, Any] | None = None, ns: str | None = None) -> dict[str, Any]:
    out = {} if out is None else out
    if isinstance(schema, list):
        for b in schema:
            all_names(b, out, ns)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "enum", "fixed"):
            space = schema.get("namespace", ns)
            full = _full(schema["name"], space) if "." not in schema["name"] else schema["name"]
            out[full] = schema
            out.setdefault(schema["name"], schema)
            for f in schema.get("fields", ()):
                all_names(f["type"], out, space)
        elif kind == "array":
            all_names(schema["items"], out, ns)
        elif kind == "map":
            all_names(schema["values"], out, ns)
    return out


def random_value(rng: random.Random, t: Any, names: dict[str, Any]) -> Any:
    """A value of ``t`` as fastavro writes it with logical types stripped (raw Avro values)."""
    t = resolve(t, names)
    if isinstance(t, list):
        return random_value(rng, rng.choice(t), names)
    kind = t if isinstance(t, str) else t["type"]
    logical = None if isinstance(t, str) else t.get("logicalType")
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        if logical == "date":
            return rng.randint(-719162, 2932896)
        if logical == "time-millis":
            return rng.randint(0, 86399999)
        return rng.choice([0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)])
    if kind == "long":
        if logical in ("timestamp-millis", "local-timestamp-millis"):
            return rng.randint(MIN_MS, MAX_MS)
        if logical in ("timestamp-micros", "local-timestamp-micros"):
            return rng.randint(MIN_MS, MAX_MS) * 1000 + rng.randint(0, 999)
        return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1), rng.randint(-300, 300)])
    if kind == "float":
        v = rng.choice([0.0, -1.5, float("inf"), rng.uniform(-1e30, 1e30)])
        return struct.unpack("<f", struct.pack("<f", v))[0]
    if kind == "double":
        return rng.choice([0.0, -0.0, 1e308, float("-inf"), rng.uniform(-1e300, 1e300)])
    if kind in ("bytes", "fixed") and logical == "decimal":
        p = t["precision"]
        v = rng.randint(-(10**p) + 1, 10**p - 1)
        size = t["size"] if kind == "fixed" else max(1, (v.bit_length() + 8) // 8)
        return v.to_bytes(size, "big", signed=True)
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 12))
    if kind == "fixed":
        return rng.randbytes(t["size"])
    if kind == "string":
        if logical == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128)))
        return "".join(rng.choice("aZ09 é€😀") for _ in range(rng.randint(0, 10)))
    if kind == "enum":
        return rng.choice(t["symbols"])
    if kind == "array":
        return [random_value(rng, t["items"], names) for _ in range(rng.randint(0, 4))]
    if kind == "map":
        return {f"k{i}": random_value(rng, t["values"], names) for i in range(rng.randint(0, 3))}
    if kind == "record":
        return {f["name"]: random_value(rng, f["type"], names) for f in t["fields"]}
    raise AssertionError(kind)


def strip_logical(schema: Any) -> Any:
    """The schema without logical types (fastavro then writes and reads the raw values)."""
    schema = copy.deepcopy(schema)

    def walk(t: Any) -> Any:
        if isinstance(t, list):
            return [walk(b) for b in t]
        if isinstance(t, dict):
            t.pop("logicalType", None)
            for f in t.get("fields", ()):
                f["type"] = walk(f["type"])
            if "items" in t:
                t["items"] = walk(t["items"])
            if "values" in t:
                t["values"] = walk(t["values"])
        return t

    return walk(schema)


def encode(schema: Any, value: Any) -> bytes:
    """``value`` written by fastavro (schema parsed without logical types)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(strip_logical(schema)), value)
    return out.getvalue()


def read(data: bytes, writer: Any, reader: Any | None = None) -> Any:
    """fastavro's reading of ``data`` (raw values), with schema resolution when ``reader`` is given."""
    w = fastavro.parse_schema(strip_logical(writer))
    r = fastavro.parse_schema(strip_logical(reader)) if reader is not None else None
    return fastavro.schemaless_reader(io.BytesIO(data), w, r)


def _kind_of(t: Any, names: dict[str, Any]) -> str:
    t = resolve(t, names)
    return t if isinstance(t, str) else "union" if isinstance(t, list) else str(t["type"])


def _branch_of(value: Any, branches: list[Any], names: dict[str, Any]) -> int:
    kinds = [_kind_of(b, names) for b in branches]
    wanted: tuple[str, ...]
    if value is None:
        wanted = ("null",)
    elif isinstance(value, bool):
        wanted = ("boolean",)
    elif isinstance(value, int):
        wanted = ("int", "long")
    elif isinstance(value, float):
        wanted = ("float", "double")
    elif isinstance(value, str):
        wanted = ("string", "enum")
    elif isinstance(value, bytes):
        wanted = ("bytes", "fixed")
    elif isinstance(value, dict):
        wanted = ("record", "map")
    else:
        wanted = ("array",)
    return next(i for i, k in enumerate(kinds) if k in wanted)


def expected(value: Any, t: Any, names: dict[str, Any]) -> Any:
    """A raw value of reader type ``t`` as kbatch's Spark mapping gives it from ``to_pylist``."""
    t = resolve(t, names)
    if isinstance(t, list):
        if value is None:
            return None
        others = [b for b in t if b != "null"]
        kinds = {_kind_of(b, names) for b in others}
        if len(others) == 1:
            return expected(value, others[0], names)
        if kinds in ({"int", "long"}, {"float", "double"}):
            return value
        k = _branch_of(value, others, names)
        return {f"member{i}": (expected(value, b, names) if i == k else None) for i, b in enumerate(others)}
    kind = t if isinstance(t, str) else t["type"]
    logical = None if isinstance(t, str) else t.get("logicalType")
    if value is None:
        return None
    if logical == "date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        v = EPOCH + datetime.timedelta(milliseconds=value)
        return v if logical.startswith("timestamp") else v.replace(tzinfo=None)
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        v = EPOCH + datetime.timedelta(microseconds=value)
        return v if logical.startswith("timestamp") else v.replace(tzinfo=None)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        unscaled = decimal.Decimal(int.from_bytes(value, "big", signed=True))
        return unscaled.scaleb(-t.get("scale", 0), decimal.Context(prec=80))
    if logical == "uuid" and kind == "fixed":
        return str(uuid.UUID(bytes=value))
    if kind == "float":
        return struct.unpack("<f", struct.pack("<f", value))[0]  # a promoted long or int, as float32
    if kind == "bytes" and isinstance(value, str):
        return value.encode("latin-1")  # fastavro hands a bytes default over as its JSON string
    if kind == "record":
        return {f["name"]: expected(value[f["name"]], f["type"], names) for f in t["fields"]}
    if kind == "array":
        return [expected(v, t["items"], names) for v in value]
    if kind == "map":
        return [(k, expected(v, t["values"], names)) for k, v in value.items()]
    return value


class Undecodable(ValueError):
    """A value the Arrow mapping cannot hold (a duration past int32 months or days): its record
    is an error."""


def expected_arrow(value: Any, t: Any, names: dict[str, Any]) -> Any:
    """A raw value of reader type ``t`` as kbatch's Arrow mapping (``mapping="arrow"``) gives it
    from ``to_pylist`` (nanosecond and interval values compared apart by the test)."""
    t = resolve(t, names)
    if isinstance(t, list):
        if value is None:
            return None
        others = [b for b in t if b != "null"]
        kinds = {_kind_of(b, names) for b in others}
        if len(others) == 1 or kinds in ({"int", "long"}, {"float", "double"}):
            return expected_arrow(value, others[0], names) if len(others) == 1 else value
        return expected_arrow(value, others[_branch_of(value, others, names)], names)  # a dense union
    kind = t if isinstance(t, str) else t["type"]
    logical = None if isinstance(t, str) else t.get("logicalType")
    if value is None:
        return None
    if logical in ("time-millis", "time-micros") and not 0 <= value < (86_400_000 if logical == "time-millis"
                                                                       else 86_400_000_000):
        raise Undecodable("not a time of day")
    if logical in ("time-millis", "time-micros", "timestamp-nanos", "local-timestamp-nanos"):
        return value  # compared as the integers they hold (arrow_plain)
    if logical == "uuid":
        return value if kind == "fixed" else uuid.UUID(value).bytes
    if logical == "duration":
        months, days, millis = struct.unpack("<III", value)
        if months >= 2**31 or days >= 2**31:
            raise Undecodable("duration")
        return (months, days, millis * 1_000_000)
    if kind == "record":
        return {f["name"]: expected_arrow(value[f["name"]], f["type"], names) for f in t["fields"]}
    if kind == "array":
        return [expected_arrow(v, t["items"], names) for v in value]
    if kind == "map":
        return [(k, expected_arrow(v, t["values"], names)) for k, v in value.items()]
    return expected(value, t, names)


def arrow_plain(arr: Any) -> list[Any]:
    """An Arrow array as Python values the way :func:`expected_arrow` writes them: times and
    nanosecond timestamps as their integers, intervals as ``(months, days, nanos)``, dense unions
    as the value of their branch, maps as ``(key, value)`` pairs."""
    import pyarrow as pa

    t = arr.type
    valid = [v.is_valid for v in arr] if arr.null_count else [True] * len(arr)
    if pa.types.is_struct(t):
        fields = {t.field(i).name: arrow_plain(arr.field(i)) for i in range(t.num_fields)}
        return [{k: v[i] for k, v in fields.items()} if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_map(t):
        keys, items = arrow_plain(arr.keys), arrow_plain(arr.items)
        offs = arr.offsets.to_pylist()
        return [list(zip(keys[offs[i] - offs[0]:offs[i + 1] - offs[0]], items[offs[i] - offs[0]:offs[i + 1] - offs[0]],
                         strict=True)) if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_list(t):
        flat = arrow_plain(arr.values)
        offs = arr.offsets.to_pylist()
        return [flat[offs[i]:offs[i + 1]] if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_union(t):
        children = [arrow_plain(arr.field(k)) for k in range(t.num_fields)]
        codes, offsets = arr.type_codes.to_pylist(), arr.offsets.to_pylist()
        return [children[c][o] for c, o in zip(codes, offsets, strict=True)]
    if pa.types.is_time(t) or (pa.types.is_timestamp(t) and t.unit == "ns"):
        return arr.cast(pa.int32() if t == pa.time32("ms") else pa.int64()).to_pylist()
    if t == pa.month_day_nano_interval():
        return [None if x is None else (x.months, x.days, x.nanoseconds) for x in arr.to_pylist()]
    return arr.to_pylist()


# ---------------------------------------------------------------- evolution
