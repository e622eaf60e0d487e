#!/usr/bin/env bash
# Build sanitized, coverage-instrumented extensions and run every fuzz/fuzz_*.py harness.
#
#   bash fuzz/run.sh            # 60 s per harness
#   bash fuzz/run.sh 600        # 10 minutes per harness
#
# Exit status: 0 when no harness found anything; 1 on any finding (the reproducer paths are
# printed); 2 when the tools are missing. See docs/fuzzing.md.
#
# Environment:
#   KBATCH_FUZZ_DIR     scratch directory (default: a fresh mktemp dir, kept for the reproducers)
#   KBATCH_FUZZ_CORPUS  where the working corpora live and grow across runs
#                       (default: $TMPDIR/kbatch-fuzz/corpus; outside the repository)
#   KBATCH_FUZZ_ONLY    space-separated harness names to run (e.g. "decode protocol")
#   KBATCH_FUZZ_KNOWN   known defects the oracles tolerate (fuzz/oracle.py), e.g. "index,client_id"
#   KBATCH_FUZZ_ASAN    1 (default): AddressSanitizer build; 0: coverage only, optimised (faster)
#   KBATCH_FUZZ_NATIVE  1 (default): C coverage with clang when there is one; 0: the gcc fallback
#   KBATCH_FUZZ_RSS_MB  libFuzzer's -rss_limit_mb (default 4096)
#   KBATCH_FUZZ_FLAGS   extra libFuzzer flags for every harness (e.g. "-seed=1 -jobs=2")
#   PYTHON              the interpreter (default: python); it needs atheris and kbatch's build deps
#
# What it does:
#  1. copies the source tree to the scratch directory (the instrumented .so never lands in the
#     work tree: it cannot be imported without the sanitizer runtime preloaded);
#  2. with clang: builds the extensions with -fsanitize=fuzzer-no-link (SanitizerCoverage, so
#     libFuzzer sees which C branches an input reaches) and -fsanitize=address with Cython's
#     bounds checks and C asserts on (KBATCH_DEBUG=1), and links clang's libFuzzer into a
#     shared library to preload, in front of the ASan runtime: atheris then drives the fuzzing
#     with that libFuzzer, which gets the C coverage (ASan's runtime has do-nothing weak
#     definitions of the coverage callbacks; preloading libFuzzer first makes its own win).
#     Without clang: gcc's ASan as tools/asan.sh does, and no coverage feedback at all: gcc's
#     libasan, preloaded, also swallows the counters atheris registers for kbatch's Python code
#     (measured: libFuzzer reports no "cov:"), so inputs are mutated blind while ASan watches.
#     Without clang and with KBATCH_FUZZ_ASAN=0: a plain build and Python-level coverage only;
#  3. checks that ASan reports a deliberate overflow under exactly this preload (a silent run
#     must mean something);
#  4. writes the seeds (fuzz/make_seeds.py) and runs each harness for SECONDS, one after the
#     other, nice'd; a crash, an oracle failure (an uncaught Python exception), an ASan report,
#     a timeout (-timeout=30 s per input) or the memory limit (-rss_limit_mb) is a finding.
set -euo pipefail

SECONDS_EACH="${1:-60}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
ASAN="${KBATCH_FUZZ_ASAN:-1}"
WORK="${KBATCH_FUZZ_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/kbatch-fuzz.XXXXXX")}"
CORPUS="${KBATCH_FUZZ_CORPUS:-${TMPDIR:-/tmp}/kbatch-fuzz/corpus}"
mkdir -p "$WORK" "$CORPUS"
WORK="$(cd "$WORK" && pwd)"

if ! "$PY" -c "import atheris" 2> /dev/null; then
    echo "run.sh: atheris is not installed in $PY (pip install atheris)" >&2
    exit 2
fi

# 1. the tree, without build outputs and generated C
mkdir -p "$WORK/src"
tar -C "$ROOT" -cf - \
    --exclude=.git --exclude=build --exclude=dist --exclude=wheelhouse --exclude='*.egg-info' \
    --exclude='__pycache__' --exclude='.pytest_cache' --exclude='.hypothesis' \
    --exclude='.mypy_cache' --exclude='.ruff_cache' --exclude='.venv*' --exclude='.benchmarks' \
    --exclude='*.so' --exclude='kbatch/*.c' --exclude='kbatch/protocol/*.c' --exclude='*.html' \
    . | tar -C "$WORK/src" -xf -
SRC="$WORK/src"
cd "$SRC"

# 2. the build
build_env=()
preload=()
asan_lib=""
if [[ "${KBATCH_FUZZ_NATIVE:-1}" == 1 ]] && command -v clang > /dev/null; then
    native=clang
    flags="-fsanitize=fuzzer-no-link"
    fuzzer_a="$(clang -print-file-name=libclang_rt.fuzzer_no_main-x86_64.a)"
    if [[ "$fuzzer_a" != /* || ! -e "$fuzzer_a" ]]; then
        echo "run.sh: clang has no libclang_rt.fuzzer_no_main (apt-get install clang / libclang-rt-dev)" >&2
        exit 2
    fi
    clang -shared -o "$WORK/libfuzzer.so" -Wl,--whole-archive "$fuzzer_a" -Wl,--no-whole-archive \
        -lstdc++ -lpthread -lm
    preload+=("$WORK/libfuzzer.so")
    build_env+=(CC=clang "LDSHARED=clang -shared" "CFLAGS=$flags" "LDFLAGS=$flags")
    [[ "$ASAN" == 1 ]] && asan_lib="$(clang -print-file-name=libclang_rt.asan-x86_64.so)"
else
    native=none
    if [[ "$ASAN" == 1 ]]; then
        echo "run.sh: WARNING: no clang (or KBATCH_FUZZ_NATIVE=0): gcc's ASan build, fuzzed WITHOUT coverage" \
            "feedback (install clang; or KBATCH_FUZZ_ASAN=0 for Python-level coverage without ASan)" >&2
    else
        echo "run.sh: no clang (or KBATCH_FUZZ_NATIVE=0): Python-level coverage only" >&2
    fi
    [[ "$ASAN" == 1 ]] && asan_lib="$(gcc -print-file-name=libasan.so)"
fi
if [[ "$ASAN" == 1 ]]; then
    if [[ "$asan_lib" != /* || ! -e "$asan_lib" ]]; then
        echo "run.sh: no AddressSanitizer runtime found" >&2
        exit 2
    fi
    asan_lib="$(readlink -f "$asan_lib")"
    preload+=("$asan_lib")
    build_env+=(KBATCH_SANITIZE=address KBATCH_DEBUG=1)
fi
echo "run.sh: building in $SRC (native coverage: $native, ASan: $ASAN)"
env "${build_env[@]}" nice "$PY" setup.py -q build_ext --inplace --force > "$WORK/build.log" 2>&1 || {
    tail -30 "$WORK/build.log" >&2
    echo "run.sh: build failed (log: $WORK/build.log)" >&2
    exit 2
}
if [[ "$ASAN" == 1 ]]; then
    for so in kbatch/codec/_core*.so kbatch/protocol/_kernel*.so kbatch/codec/_arrowkernels*.so kbatch/values/avro/_avrokernel*.so \
              kbatch/values/protobuf/_protokernel*.so; do
        if ! nm -D "$so" | grep __asan_ > /dev/null; then
            echo "run.sh: $so was not built with -fsanitize=address" >&2
            exit 2
        fi
    done
fi

export PYTHONPATH="$SRC"
export PYTHONMALLOC=malloc   # every Python buffer its own malloc block, with red zones
export ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:print_summary=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
PRELOAD="${preload[*]:-}"

# 3. the positive control: ASan must catch a deliberate overflow under this very preload
if [[ "$ASAN" == 1 ]]; then
    (ASAN_OPTIONS="$ASAN_OPTIONS:abort_on_error=0" LD_PRELOAD="$PRELOAD" "$PY" -c '
import ctypes
buf = ctypes.create_string_buffer(100)
ctypes.string_at(ctypes.addressof(buf), 200)
' 2> "$WORK/asan-control.log") 2> /dev/null || true
    if ! grep -qs heap-buffer-overflow "$WORK/asan-control.log"; then
        echo "run.sh: AddressSanitizer missed a deliberate heap-buffer-overflow; not fuzzing" >&2
        cat "$WORK/asan-control.log" >&2
        exit 2
    fi
    echo "run.sh: positive control caught (heap-buffer-overflow)"
fi

# 4. seeds, then each harness
LD_PRELOAD="$PRELOAD" "$PY" fuzz/make_seeds.py "$WORK/seeds"
status=0
summary=()
for harness in fuzz/fuzz_*.py; do
    name="$(basename "$harness" .py)"
    name="${name#fuzz_}"
    if [[ -n "${KBATCH_FUZZ_ONLY:-}" && " $KBATCH_FUZZ_ONLY " != *" $name "* ]]; then
        continue
    fi
    corpus="$CORPUS/$name"
    out="$WORK/findings/$name"
    mkdir -p "$corpus" "$out"
    seeds=()
    [[ -d "$WORK/seeds/$name" ]] && seeds=("$WORK/seeds/$name")
    log="$WORK/$name.log"
    echo "run.sh: $name for ${SECONDS_EACH}s (corpus $corpus, log $log)"
    rc=0
    # shellcheck disable=SC2086  # KBATCH_FUZZ_FLAGS is a list of flags
    LD_PRELOAD="$PRELOAD" nice "$PY" "$harness" \
        -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb="${KBATCH_FUZZ_RSS_MB:-4096}" \
        -print_final_stats=1 -artifact_prefix="$out/" ${KBATCH_FUZZ_FLAGS:-} \
        "$corpus" "${seeds[@]}" > "$log" 2>&1 || rc=$?
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    rss="$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)"
    cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)"
    summary+=("$name: ${runs:-?} runs, ${cov:-cov ?}, peak RSS ${rss:-?} MB, exit $rc")
    found=()
    while IFS= read -r -d '' f; do found+=("$f"); done < <(find "$out" -type f -print0)
    if [[ $rc -ne 0 || ${#found[@]} -gt 0 ]] || grep -q "ERROR: AddressSanitizer" "$log"; then
        status=1
        echo "run.sh: FINDING in $name (exit $rc); log: $log" >&2
        grep -m1 -B2 -A25 "Uncaught Python exception\|ERROR: AddressSanitizer\|ERROR: libFuzzer" "$log" >&2 || tail -30 "$log" >&2
        for f in "${found[@]}"; do
            echo "run.sh: reproducer: $f" >&2
            echo "run.sh:   rerun: (cd $SRC && LD_PRELOAD=\"$PRELOAD\" PYTHONPATH=$SRC PYTHONMALLOC=malloc ASAN_OPTIONS=$ASAN_OPTIONS $PY $harness $f)" >&2
        done
    fi
done

echo "run.sh: summary (${SECONDS_EACH}s each, native coverage: $native, ASan: $ASAN," \
    "known defects tolerated: ${KBATCH_FUZZ_KNOWN:-none})"
for line in "${summary[@]}"; do echo "  $line"; done
if [[ $status -ne 0 ]]; then
    echo "run.sh: FAILED: findings above (scratch dir $WORK)" >&2
else
    echo "run.sh: OK, nothing found"
fi
exit "$status"
