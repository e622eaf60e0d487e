"""An Avro reader schema cut to the fields a decode keeps (``fields=``, a
:data:`~kbatch.values._fields.FieldTree`).

The cut reader is compiled with each writer as any reader is
(:class:`~kbatch.values.avro._compile.AvroProgram`): the writer's fields the cut reader lacks are
skipped by the program (their bytes walked, not decoded), so only the kept fields are decoded and
laid out. A record kept in part is a copy holding only its kept fields (the same name, aliases
and defaults: it resolves writers as the whole record does), in the reader's order; a record
reached through a union of it and null stays in that union. Every other type is shared with the
reader, untouched.

>>> from kbatch.values._fields import field_tree
>>> from kbatch.values.avro._schema import parse_avro
>>> r = parse_avro('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},'
...                '{"name": "b", "type": ["null", {"type": "record", "name": "B", "fields": ['
...                '{"name": "x", "type": "int"}, {"name": "y", "type": "string"}]}]}]}')
>>> cut = project_avro(r, field_tree(["b.y"]))
>>> [f.name for f in cut.fields], [f.name for f in cut.fields[0].type.branches[1].fields]
(['b'], ['y'])
"""

from __future__ import annotations

from .._fields import FieldTree, kept, not_a_record
from ._schema import AvroField, AvroType

__all__ = ["project_avro"]


def project_avro(t: AvroType, tree: FieldTree | None, where: str = "value") -> AvroType:
    """Reader type ``t`` with only the fields of ``tree`` (a record, or a union of null and one
    record); ``t`` itself for None."""
    if tree is None:
        return t
    if t.kind == "union":
        records = [b for b in t.branches if b.kind == "record"]
        if len(records) != 1 or any(b.kind not in ("record", "null") for b in t.branches):
            raise not_a_record(where, f"a union of {', '.join(b.name or b.kind for b in t.branches)}", tree)
        return AvroType("union", branches=tuple(project_avro(b, tree, where) if b.kind == "record" else b
                                                for b in t.branches))
    if t.kind != "record":
        what = t.kind if t.name is None else f"{t.kind} {t.name}"
        raise not_a_record(where, f"{'an' if what[0] in 'aeiou' else 'a'} {what}", tree)
    keep = kept(tree, [f.name for f in t.fields], where)
    fields = [AvroField(f.name, project_avro(f.type, keep[f.name], f"{where}.{f.name}"), f.default, f.aliases)
              for f in t.fields if f.name in keep]
    return AvroType("record", logical=t.logical, name=t.name, aliases=t.aliases, fields=fields)
