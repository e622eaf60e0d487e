"""Projection: the value fields a decode keeps (``fields=``), as a tree each language prunes its
reader by.

``fields`` names top-level fields (``"customer"``) or dotted paths into nested records
(``"address.city"``); :func:`field_tree` turns them into a :data:`FieldTree` (hashable: a part of
the programs' cache keys), in which a field kept whole maps to ``None`` and a record kept in part
to the tree of its kept fields (``"address"`` with ``"address.city"`` keeps ``address`` whole).
Each language prunes its own reader with it, every level checked by :func:`kept` (an unknown
name is a ``ValueError`` naming it and the fields there are): Avro its reader schema
(:func:`kbatch.values.avro.project_avro`), Protobuf its message layout
(:class:`kbatch.values.protobuf._compile.ProtoProgram`), JSON the Arrow type the parser is given
(:func:`project_struct`). The output keeps the reader's order, whatever the order of ``fields``.

>>> tree = field_tree(["total", "address.city", "customer"])
>>> tree
(('address', (('city', None),)), ('customer', None), ('total', None))
>>> t = pa.struct([("customer", pa.string()), ("total", pa.int64()),
...                ("address", pa.struct([("street", pa.string()), ("city", pa.string())]))])
>>> project_struct(t, tree)
StructType(struct<customer: string, total: int64, address: struct<city: string>>)
>>> project_struct(t, field_tree(["adress"]))
Traceback (most recent call last):
  ...
ValueError: fields: value has no field 'adress' (its fields: customer, total, address)
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

__all__ = ["FieldTree", "field_tree", "kept", "not_a_record", "project_struct"]

#: ``((name, subtree or None), ...)`` sorted by name: the fields kept at one level, ``None`` for
#: a field kept whole.
FieldTree = tuple[tuple[str, "FieldTree | None"], ...]


#: One level of the tree being built: a kept name -> its sub-level, None when kept whole.
Level = dict[str, "Level | None"]


def field_tree(fields: Sequence[str] | None) -> FieldTree | None:
    """``fields`` (names and dotted paths) as a :data:`FieldTree`; None for None (every field)."""
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)) or not isinstance(fields, Sequence):
        raise TypeError(f"fields must be a sequence of field names (a list of str), got {type(fields).__name__}")
    if not fields:
        raise ValueError("fields: name at least one field to keep (None keeps them all)")
    root: dict[str, Level | None] = {}
    for path in fields:
        if not isinstance(path, str):
            raise TypeError(f"fields: each field is a str (a name or a dotted path), got {type(path).__name__}")
        parts = path.split(".")
        if not all(parts):
            raise ValueError(f"fields: {path!r} is not a field name or a dotted path (a.b.c)")
        level: dict[str, Level | None] = root
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            if part in level and level[part] is None:
                break  # the field is kept whole already
            if last:
                level[part] = None
                break
            sub = level.setdefault(part, {})
            assert sub is not None
            level = sub
    return _frozen(root)


def _frozen(level: dict[str, Level | None]) -> FieldTree:
    return tuple((name, None if sub is None else _frozen(sub)) for name, sub in sorted(level.items()))


def kept(tree: FieldTree, names: Sequence[str], where: str) -> dict[str, FieldTree | None]:
    """The fields of ``tree`` kept at a level whose fields are ``names`` (``where``: its path,
    for the error), by name; a ``ValueError`` naming the first one ``names`` lacks."""
    out = dict(tree)
    for name in out:
        if name not in names:
            raise ValueError(f"fields: {where} has no field {name!r} (its fields: {', '.join(names)})")
    return out


def not_a_record(where: str, what: str, tree: FieldTree) -> ValueError:
    """The error of a path into ``where``, which is ``what`` and not a record."""
    return ValueError(f"fields: {where} is {what}, not a record: it has no field {tree[0][0]!r}")


def project_struct(t: pa.DataType, tree: FieldTree | None, where: str = "value") -> pa.DataType:
    """Struct type ``t`` with only the fields of ``tree`` (nested structs pruned likewise), in
    ``t``'s order, each field's type and nullability as in ``t``."""
    if tree is None:
        return t
    if not pa.types.is_struct(t):
        raise not_a_record(where, f"a {t}", tree)
    keep = kept(tree, [f.name for f in t], where)
    return pa.struct([f.with_type(project_struct(f.type, keep[f.name], f"{where}.{f.name}"))
                      for f in t if f.name in keep])
