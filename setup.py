"""Build the ``kbatch._core`` extension.

Environment switches:

``KBATCH_DEBUG=1``
    Cython bounds/wraparound checks on everywhere, ``-O0 -g``, C asserts kept.
``KBATCH_SANITIZE=address``
    Also compile and link with ``-fsanitize=address`` (see ``tools/asan.sh``).
"""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

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
    extension("kbatch._core", "kbatch/_core.pyx", libraries=["z"]),  # zlib's crc32 for magic 0/1
    extension("kbatch.protocol._kernel", "kbatch/protocol/_kernel.pyx"),
    extension("kbatch._arrowkernels", "kbatch/_arrowkernels.pyx"),
    extension("kbatch.internal._offsetkernel", "kbatch/internal/_offsetkernel.pyx"),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        annotate=os.environ.get("KBATCH_ANNOTATE", "") not in ("", "0"),
    ),
)
