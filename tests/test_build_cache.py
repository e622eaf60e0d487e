"""setup.py's build cache: the README's second install reuses the first one's compiled modules.

Each test builds a copy of ``setup.py`` in a temporary folder (the work tree is never written
to) whose four Cython modules are one line each, so that a real compile takes seconds.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support.tree import source_file

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

pytest.importorskip("Cython")
pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")


@functools.cache
def _extensions() -> tuple[str, ...]:
    """Every extension setup.py builds (read from it, so a new kernel is never left out of the copy).

    Read when a test runs, not at import: outside a source checkout (the wheel's own test run)
    ``source_file`` skips the test, which it may not do while the module is being collected.
    """
    return tuple(re.findall(r'extension\("[\w.]+", "([\w/]+)\.pyx"[,)]', source_file("setup.py").read_text()))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    modules = _extensions()
    assert "kbatch/codec/_core" in modules and len(modules) >= 6, modules  # setup.py read as it is written
    shutil.copy2(source_file("setup.py"), tmp_path / "setup.py")
    for module in modules:
        pyx = tmp_path / (module + ".pyx")
        pyx.parent.mkdir(parents=True, exist_ok=True)
        pyx.write_text(f"NAME = {module!r}\n")
        for package in pyx.relative_to(tmp_path).parents[:-1]:  # kbatch/codec/ and kbatch/ itself
            (tmp_path / package / "__init__.py").touch()
    return tmp_path


def _build(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", *args], cwd=tree,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _key(tree: Path, **env: str) -> str:
    code = "import sys, runpy; sys.argv = ['setup.py', '--name']; print(runpy.run_path('setup.py')['build_key']())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return out.stdout.strip().splitlines()[-1]


def _modules(tree: Path) -> dict[str, bytes]:
    return {m: (tree / (m + SUFFIX)).read_bytes() for m in _extensions()}


def test_the_second_build_copies_what_the_first_compiled(tree: Path) -> None:
    first = _build(tree)
    assert "taken from" not in first.stdout
    cached = {p.name for p in (tree / "build" / "ext-cache" / _key(tree)).iterdir()}
    assert cached == {Path(m).name + SUFFIX for m in _extensions()}
    built = _modules(tree)
    for c in tree.glob("kbatch/**/*.c"):
        c.unlink()
    for m in _extensions():
        (tree / (m + SUFFIX)).unlink()
    second = _build(tree)
    assert second.stdout.count("taken from") == len(_extensions())
    assert not list(tree.glob("kbatch/**/*.c")), "Cython ran although every module was cached"
    assert _modules(tree) == built


def test_a_cached_module_is_never_taken_with_force_or_the_switch(tree: Path) -> None:
    _build(tree)
    folder = tree / "build" / "ext-cache" / _key(tree)
    for path in folder.iterdir():
        path.write_bytes(b"not a module")  # taken, it would fail the import below
    for args, env in ((("--force",), {}), ((), {"KBATCH_BUILD_CACHE": "0"})):
        done = _build(tree, *args, **env)
        assert "taken from" not in done.stdout
        probe = subprocess.run([sys.executable, "-c", "import kbatch.codec._core as m; print(m.NAME)"], cwd=tree,
                               capture_output=True, text=True, check=False)
        assert probe.stdout.strip() == "kbatch/codec/_core", probe.stderr


def test_the_key_follows_every_source_and_switch(tree: Path) -> None:
    key = _key(tree)
    assert _key(tree) == key
    (tree / "kbatch" / "_core_extra.pxi").write_text("# an included part\n")
    with_pxi = _key(tree)
    assert with_pxi != key
    assert _key(tree, CFLAGS="-O1") not in (key, with_pxi)
    assert _key(tree, KBATCH_DEBUG="1") not in (key, with_pxi)
