"""The house by layer (docs/DESIGN.md): what keeps it, checked on the source tree.

``lint-imports`` checks the layers and that packages import only each other's faces, on the
import graph of the Python modules; the compiled modules are not in that graph, so the faces
rule is checked here again from the source of every ``import``. The rest are the limits issue
36 set: a small top level, no file over 1,000 lines (the convert job's modules ~600), and
function-local imports of kbatch modules only where they defer an optional dependency (saying
so: ``# defers pyspark``), five others at most.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KBATCH = ROOT / "kbatch"
SOURCES = (".py", ".pyx", ".pxd", ".pxi", ".pyi")

pytestmark = pytest.mark.skipif(not (KBATCH / "__init__.py").exists(), reason="no source tree beside the tests")


def sources() -> list[Path]:
    return sorted(p for p in KBATCH.rglob("*") if p.suffix in SOURCES and "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def owner(module: str) -> str | None:
    """The package a private module belongs to (``kbatch.codec._core`` -> ``kbatch.codec``)."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the tree (compiled ones by their source)."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.is_dir() or any(path.with_suffix(s).exists() for s in (".py", ".pyx"))


def kbatch_imports(path: Path) -> list[tuple[ast.stmt, str, bool]]:
    """``(node, imported module, inside a function)`` for every import of a kbatch module."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found: list[tuple[ast.stmt, str, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                if base == "kbatch" or base.startswith("kbatch."):
                    for alias in child.names:  # ``from pkg import module`` imports the module
                        sub = f"{base}.{alias.name}"
                        found.append((child, sub if is_module(sub) else base, inner))
            elif isinstance(child, ast.Import):
                found.extend((child, a.name, inner) for a in child.names if a.name.split(".")[0] == "kbatch")
            visit(child, inner)

    visit(tree, False)
    return found


def test_the_top_level_is_faces_and_shared_modules() -> None:
    top = sorted(p.name for p in KBATCH.iterdir() if p.is_file() and (p.suffix in SOURCES or p.name == "py.typed"))
    assert len(top) <= 12, top


def test_no_file_is_over_a_thousand_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sources() if (n := len(p.read_text().splitlines())) > 1000}
    assert long == {}


def test_the_convert_job_modules_stay_small() -> None:
    long = {p.name: n for p in (KBATCH / "convert").glob("*.py") if (n := len(p.read_text().splitlines())) > 650}
    assert long == {}


def test_packages_import_only_each_others_faces() -> None:
    crossing = []
    for path in sources():
        if path.suffix != ".py":
            continue
        me = module_name(path)
        for node, imported, _ in kbatch_imports(path):
            pkg = owner(imported)
            if imported == "kbatch" or (pkg is not None and me != pkg and not me.startswith(pkg + ".")):
                crossing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {imported}")
    assert crossing == []


def test_function_local_imports_defer_an_optional_dependency() -> None:
    others: set[str] = set()
    for path in sources():
        if path.suffix != ".py":
            continue
        lines = path.read_text().splitlines()
        for node, _, local in kbatch_imports(path):
            said = " ".join(lines[node.lineno - 2 : (node.end_lineno or node.lineno)])
            if local and "defers " not in said:
                others.add(f"{path.relative_to(ROOT)}:{node.lineno}")  # one per statement
    assert len(others) <= 5, sorted(others)


def test_the_import_contracts_hold() -> None:
    pytest.importorskip("importlinter")
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
