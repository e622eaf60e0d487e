"""The public surface of kbatch as text: every public module's ``__all__``, each name's kind and
signature (a class's public methods and properties too), and every CLI subcommand's flags.

``tests/test_api_surface.py`` compares it with the checked-in ``tests/api_surface.txt``, so that
moving code cannot change the API by accident. After a deliberate change, write the file anew::

    PYTHONPATH=tests python -m support.api_surface > tests/api_surface.txt

and let the diff say what changed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from collections.abc import Iterator

#: The modules a user imports: the package face and every module without a private part.
PUBLIC_MODULES = (
    "kbatch",
    "kbatch.errors",
    "kbatch.log",
    "kbatch.arrow",
    "kbatch.polars",
    "kbatch.duckdb",
    "kbatch.values",
    "kbatch.tables",
    "kbatch.spark",
    "kbatch.protocol",
    "kbatch.internal",
    "pyspark_kbatch",
)

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: A module qualifier in an annotation (``_storage.Location``, ``np.ndarray``): dropped, so that
#: moving a class to another module does not read as an API change.
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_][A-Za-z0-9_]*\.)+(?=[A-Za-z_])")
_SIMPLE = (bool, int, float, str, bytes, type(None))


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        # a compiled class: Cython's embedded signature, the docstring's first line
        first = (getattr(obj, "__doc__", None) or "").split("\n", 1)[0]
        name = getattr(obj, "__name__", "")
        if not (name and first.startswith(name + "(") and first.endswith(")")):
            return "(?)"
        text = first[len(name):]
    return _QUALIFIER.sub("", _ADDRESS.sub("", text))


def _class_lines(name: str, cls: type) -> Iterator[str]:
    bases = ", ".join(b.__qualname__ for b in cls.__bases__ if b is not object)
    yield f"class {name}({bases}){_signature(cls)}"
    for member, value in sorted(vars(cls).items()):
        if member.startswith("_") and member not in ("__call__", "__iter__", "__len__", "__getitem__", "__enter__",
                                                      "__exit__", "__arrow_c_stream__", "__arrow_c_array__"):
            continue
        if isinstance(value, property) or type(value).__name__ in ("getset_descriptor", "member_descriptor"):
            yield f"    {member}: property"
        elif isinstance(value, (staticmethod, classmethod)):
            yield f"    {type(value).__name__} {member}{_signature(value.__func__)}"
        elif callable(value):
            yield f"    def {member}{_signature(getattr(cls, member))}"
        elif isinstance(value, _SIMPLE):
            yield f"    {member} = {value!r}"
        else:
            yield f"    {member}: {type(value).__name__}"


def _name_lines(name: str, obj: object) -> Iterator[str]:
    if inspect.isclass(obj):
        yield from _class_lines(name, obj)
    elif inspect.ismodule(obj):
        yield f"module {name}"
    elif callable(obj):
        yield f"def {name}{_signature(obj)}"
    elif isinstance(obj, bool):  # a flag of the environment (kbatch.duckdb.PUSHDOWN): its type alone
        yield f"{name}: bool"
    elif isinstance(obj, _SIMPLE):
        yield f"{name} = {obj!r}"
    else:
        yield f"{name}: {type(obj).__name__}"


def module_lines(module_name: str) -> Iterator[str]:
    """The surface of one module: its ``__all__`` in order, each name described."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        yield f"[{module_name}] (no __all__)"
        return
    yield f"[{module_name}]"
    for name in names:
        yield from _name_lines(name, getattr(module, name))


def cli_lines() -> Iterator[str]:
    """Every subcommand's flags: option strings (or the positional's name), nargs, choices,
    whether required, and the default."""
    from kbatch.__main__ import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in sorted(subparsers.choices.items()):
        yield f"[kbatch {command}]"
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(action.option_strings) or action.dest
            parts = [flags]
            if action.nargs is not None:
                parts.append(f"nargs={action.nargs}")
            if action.choices is not None:
                parts.append(f"choices={sorted(map(str, action.choices))}")
            if action.required and action.option_strings:
                parts.append("required")
            if action.option_strings and action.default not in (None, argparse.SUPPRESS):
                parts.append(f"default={_ADDRESS.sub('', repr(action.default))}")
            yield "    " + " ".join(parts)


def surface() -> str:
    """The whole surface as the checked-in file holds it."""
    lines: list[str] = []
    for module_name in PUBLIC_MODULES:
        lines.extend(module_lines(module_name))
        lines.append("")
    lines.extend(cli_lines())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(surface(), end="")
