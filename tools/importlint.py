"""kbatch's own import-linter contract: packages talk to each other only through their faces.

``lint-imports`` (configured in ``pyproject.toml``) runs it beside the layers contract::

    [[tool.importlinter.contracts]]
    type = "faces"

A module is private when a part of its dotted name after the root starts with ``_``
(``kbatch.codec._core``); it belongs to the package just above that part (``kbatch.codec``).
Only modules inside that package may import it, so ``kbatch.log._segment`` may not import
``kbatch.codec._core`` but may import ``kbatch.codec`` (the face) and ``kbatch._wire`` (a module
of ``kbatch`` itself, which every layer shares). And no module imports the root package's face
(``import kbatch``): the face sits on top of everything.
"""

from __future__ import annotations

from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def owner(module: str) -> str | None:
    """The package a private module belongs to, or None when ``module`` is not private.

    >>> owner("kbatch.codec._core"), owner("kbatch._wire"), owner("kbatch.codec")
    ('kbatch.codec', 'kbatch', None)
    """
    parts = module.split(".")
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


class FacesContract(Contract):
    """No import of another package's private modules, and none of the root package's face."""

    root = fields.StringField(required=False, default="kbatch")

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        broken: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            if not importer.startswith(self.root + "."):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                pkg = owner(imported)
                crossing = pkg is not None and importer != pkg and not importer.startswith(pkg + ".")
                if crossing or imported == self.root:
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = sorted({d["line_number"] for d in details})
                    why = "the root package's face" if imported == self.root else f"private to {pkg}"
                    broken.append({"importer": importer, "imported": imported, "lines": lines, "why": why})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for b in check.metadata["broken"]:
            lines = ", ".join(f"l.{n}" for n in b["lines"])
            output.print_error(f"{b['importer']} -> {b['imported']} ({lines}): {b['why']}", bold=False)
        output.new_line()
