"""Build the ``kbatch.codec._core`` extension.

Environment switches:

``KBATCH_DEBUG=1``
    Cython bounds/wraparound checks on everywhere, ``-O0 -g``, C asserts kept.
``KBATCH_SANITIZE=address``
    Also compile and link with ``-fsanitize=address`` (see ``tools/asan.sh``).
``KBATCH_BUILD_CACHE=0``
    Do not reuse (or store) compiled extensions in ``build/ext-cache/``.

The build cache: ``pip install -e .`` compiles in a fresh temporary folder every time, so the
README's two commands (``.[spark]`` then ``.[test]``) would compile the four modules twice
(about two minutes each). Each compiled module is kept under ``build/ext-cache/<key>/``, the key
a hash of everything the module is built from: every Cython source of the package, this file,
the Cython version, the interpreter's ABI, the compiler and the flags (including the
environment's ``CC``/``CFLAGS``/``LDFLAGS`` and the switches above). A build with the same key
copies the modules instead of compiling; ``--force`` (``tools/asan.sh``, ``fuzz/run.sh``) always
compiles.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import Cython
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("KBATCH_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("KBATCH_SANITIZE", "")

# The parser checks every length it reads against the end of its buffer itself,
# so Cython's per-index checks are off in release builds (and on in debug ones).
directives = {
    "language_level": "3",
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
    "freethreading_compatible": False,
}

extra_compile_args = []
extra_link_args = []
define_macros = []
if sys.platform != "win32":
    extra_compile_args += ["-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
    if DEBUG:
        extra_compile_args += ["-O0", "-g3", "-UNDEBUG"]
    else:
        extra_compile_args += ["-O3"]
    if SANITIZE:
        extra_compile_args += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer"]
        extra_link_args += [f"-fsanitize={SANITIZE}"]

def extension(name: str, source: str, **kwargs) -> Extension:
    return Extension(
        name,
        [source],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
        define_macros=define_macros,
        **kwargs,
    )


extensions = [
    extension("kbatch.codec._core", "kbatch/codec/_core.pyx", libraries=["z"]),  # zlib's crc32 for magic 0/1
    extension("kbatch.protocol._kernel", "kbatch/protocol/_kernel.pyx"),
    extension("kbatch.codec._arrowkernels", "kbatch/codec/_arrowkernels.pyx"),
    extension("kbatch.internal._offsetkernel", "kbatch/internal/_offsetkernel.pyx"),
    extension("kbatch.values.avro._avrokernel", "kbatch/values/avro/_avrokernel.pyx"),
    extension("kbatch.values.protobuf._protokernel", "kbatch/values/protobuf/_protokernel.pyx"),
]

#: The value kernels' interpreter loop is one large function calling small helpers (a slot's room,
#: a string's append, a block count); GCC's default growth limits for large functions leave them
#: as calls (about 15% of the instructions of an 18-field record): these let them be inlined.
INLINED = ("kbatch.values.avro._avrokernel", "kbatch.values.protobuf._protokernel")
GCC_INLINE = ["--param", "large-function-growth=1000", "--param", "inline-unit-growth=1000"]


def _is_gcc(cc: str) -> bool:
    """Whether ``cc`` is GCC (not clang, which takes other parameters)."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in out and "clang" not in out


HERE = Path(__file__).resolve().parent
CACHE = HERE / "build" / "ext-cache"
ENV_KEYS = ("CC", "CXX", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "KBATCH_DEBUG", "KBATCH_SANITIZE",
            "KBATCH_ANNOTATE")


def build_key() -> str:
    """A hash of everything the extensions are compiled from (see the module docstring)."""
    h = hashlib.sha256()
    sources = sorted(p for p in HERE.glob("kbatch/**/*") if p.suffix in (".pyx", ".pxd", ".pxi", ".h"))
    for path in [*sources, HERE / "setup.py"]:
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    for item in (Cython.__version__, sys.version, sysconfig.get_config_var("EXT_SUFFIX"),
                 sysconfig.get_platform(), repr(directives), repr(extra_compile_args),
                 repr(extra_link_args), *(f"{k}={os.environ.get(k, '')}" for k in ENV_KEYS)):
        h.update(str(item).encode() + b"\0")
    return h.hexdigest()[:32]


class CachedBuildExt(build_ext):
    """``build_ext`` that Cythonizes and compiles only what ``build/ext-cache`` does not hold."""

    def build_extensions(self) -> None:
        use_cache = not self.force and os.environ.get("KBATCH_BUILD_CACHE", "1") != "0"
        folder = CACHE / build_key()
        todo = []
        for ext in self.extensions:
            target = Path(self.get_ext_fullpath(ext.name))
            cached = folder / target.name
            if use_cache and cached.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(cached, target)
                print(f"kbatch: {ext.name} taken from {cached} (KBATCH_BUILD_CACHE=0 compiles it)")
            else:
                todo.append(ext)
        if not todo:
            return
        generated = cythonize(
            todo,
            compiler_directives=directives,
            annotate=os.environ.get("KBATCH_ANNOTATE", "") not in ("", "0"),
        )
        for ext, c in zip(todo, generated, strict=True):
            ext.sources = c.sources  # the .c; the Extension keeps what setuptools set on it
        compiler = getattr(self.compiler, "compiler_so", None)  # unix compilers only (not MSVC)
        if compiler and _is_gcc(compiler[0]):
            for ext in todo:
                if ext.name in INLINED:
                    ext.extra_compile_args = [*ext.extra_compile_args, *GCC_INLINE]
        self.extensions = todo
        super().build_extensions()
        if use_cache:
            folder.mkdir(parents=True, exist_ok=True)
            for ext in todo:
                target = Path(self.get_ext_fullpath(ext.name))
                tmp = folder / (target.name + ".tmp")
                shutil.copy2(target, tmp)
                os.replace(tmp, folder / target.name)  # never a half-written module in the cache


setup(ext_modules=extensions, cmdclass={"build_ext": CachedBuildExt})
