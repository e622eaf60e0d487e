#!/usr/bin/env bash
# Packaging proof (issue 3): build the sdist and a wheel from it, check their contents, check
# the wheel with `auditwheel show`/`repair`, check that its dependencies have wheels, install it
# into a fresh venv and run the tests and stubtest there, and check the builds cibuildwheel.toml
# selects. The checks are tests/test_packaging.py (which makes its own venv for build, auditwheel
# and cibuildwheel); this script runs that module alone.
#
#   bash tools/check_build.sh            # a few minutes on 2 cores; needs the package index
#   bash tools/check_build.sh -k sdist   # extra arguments go to pytest
#
# The work tree is not written to: everything happens in a copy under pytest's tmp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q --disable-pip-version-check "pytest>=8"

# The sdist, wheels, venv and logs are kept in $KBATCH_CHECK_DIR (default: a new temp dir) for
# inspection; pytest's own tmp dirs are pruned by any later pytest run.
OUT="${KBATCH_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/kbatch-check-build.XXXXXX")}"
echo "check_build.sh: working in $OUT"

# --noconftest: the module is self-contained and must not need kbatch built in this
# interpreter (tests/conftest.py imports the compiled core).
KBATCH_TEST_PACKAGING=1 exec python -m pytest -v -rA -p no:cacheprovider --noconftest \
    --basetemp="$OUT" tests/test_packaging.py "$@"
