"""Properties of the typed lazy scans (issue 37), on random roots (``support.random_typed_root``:
random Avro, Protobuf and JSON Schema values in Confluent framing, bad values and tombstones
among them, 1-3 partitions of several segments, aborted transactions):

- a random query (offset, timestamp and partition filters, a column subset, ``head(n)``, a
  filter on the decoded value) over ``kbatch.polars.scan_kafka_log`` gives exactly the eager read
  decoded by ``kbatch.values.decode`` and filtered by Polars (``errors="null"``), and the same
  SQL over ``kbatch.duckdb.register``'s view and over the eager table gives the same rows; with
  ``errors="raise"`` it raises ``ValueDecodeError`` exactly when a bad value is among the rows
  the query reads (those its filter keeps), naming the first;
- a projected decode (``fields=``, dotted paths included) equals the whole decode's fields;
- a windowed query reads the same with the time index (written by the first scan, used by the
  second) and without it, and an index file made stale or lying (truncated, another segment's,
  its segment appended to) is noted and not used, the result still the same.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

pl = pytest.importorskip("polars")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from polars.testing import assert_frame_equal  # noqa: E402
from support.projection import assert_projected, avro_paths, draw_fields, struct_paths  # noqa: E402
from support.random_typed_root import BASE_TS, LANGUAGES, TOPIC, RandomRoot, write_random_root  # noqa: E402
from support.scan_roots import term, window  # noqa: E402
from support.typed_queries import eager_frame, polars_expr, sql_term  # noqa: E402

import kbatch  # noqa: E402
from kbatch.log import ScanStats, open_logs  # noqa: E402
from kbatch.log._timeindex import TimeIndexes  # noqa: E402
from kbatch.polars import scan_kafka_log  # noqa: E402
from kbatch.values import Registry, ValueDecodeError, decode  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: Random filters over a random root (its timestamps run from BASE_TS to at most ~BASE_TS + 240)
TERMS = st.lists(st.one_of(term("offset", -1, 40), term("timestamp", BASE_TS - 5, BASE_TS + 250),
                           term("partition", 0, 2)), max_size=3)
COLUMNS = ["partition", "offset", "timestamp", "key", "value", "value_schema_id", "value_error", "headers"]
ISO = st.sampled_from(["read_uncommitted", "read_committed"])
LANGUAGE = st.sampled_from(LANGUAGES)
SEED = st.integers(0, 2**32 - 1)


def random_root(factory: pytest.TempPathFactory, seed: int, language: str) -> tuple[RandomRoot, Registry]:
    """A random root in a folder of its own (one per example) and the registry of its ``_schemas``."""
    if language == "protobuf":
        pytest.importorskip("grpc_tools")  # the random .proto is compiled by protoc
    base = Path(tempfile.mkdtemp(dir=factory.getbasetemp()))
    r = write_random_root(base, seed, language)
    return r, Registry.from_log_dirs(r.root)


def value_filter(frame: Any, which: str | None) -> Any:
    """A filter the scan cannot push down (on the decoded value), or none."""
    if which == "good":
        return pl.col("value_error").is_null()
    if which == "first_field":  # the value's first field, set (struct nulls: the value's or the field's)
        field = frame.schema["value"].fields[0].name
        return pl.col("value").struct.field(field).is_not_null()
    return None


# ---------------------------------------------------------------- the query equals the eager decode filtered

@SETTINGS
@given(language=LANGUAGE, seed=SEED, terms=TERMS, iso=ISO, limit=st.none() | st.integers(0, 40),
       columns=st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5, unique=True),
       extra=st.sampled_from([None, "good", "first_field"]))
def test_a_typed_query_equals_the_eager_decode_filtered(tmp_path_factory: pytest.TempPathFactory, language: str,
                                                        seed: int, terms: list, iso: str, limit: int | None,
                                                        columns: list[str], extra: str | None) -> None:
    r, registry = random_root(tmp_path_factory, seed, language)
    lf = scan_kafka_log(r.root, topic=TOPIC, values="auto", errors="null", isolation_level=iso, index=False)
    want = eager_frame(r.root, registry, TOPIC, iso)
    assert lf.collect_schema() == want.schema
    for t in terms:  # pushed down to the scan; applied to the eager frame
        lf, want = lf.filter(polars_expr(*t)), want.filter(polars_expr(*t))
    more = value_filter(want, extra)
    if more is not None:  # applied by the scan after its decode
        lf, want = lf.filter(more), want.filter(more)
    lf, want = lf.select(columns), want.select(columns)
    if limit is not None:
        lf, want = lf.head(limit), want.head(limit)
    assert_frame_equal(lf.collect(), want)


@SETTINGS
@given(language=LANGUAGE, seed=SEED, terms=TERMS, iso=ISO, limit=st.none() | st.integers(0, 40),
       columns=st.lists(st.sampled_from([c for c in COLUMNS if c != "value_error"]), min_size=1, max_size=4,
                        unique=True), value=st.sampled_from([True, True, False]))
def test_errors_raise_exactly_when_a_bad_value_is_read(tmp_path_factory: pytest.TempPathFactory, language: str,
                                                       seed: int, terms: list, iso: str, limit: int | None,
                                                       columns: list[str], value: bool) -> None:
    r, registry = random_root(tmp_path_factory, seed, language)
    if value and "value" not in columns:
        columns = [*columns, "value"]
    read = eager_frame(r.root, registry, TOPIC, iso)  # the rows the query reads: those its filter keeps
    lf = scan_kafka_log(r.root, topic=TOPIC, values=registry, isolation_level=iso, index=False)
    for t in terms:
        lf, read = lf.filter(polars_expr(*t)), read.filter(polars_expr(*t))
    lf = lf.select(columns)
    if limit is not None:
        lf = lf.head(limit)
    errors = [e for e in read["value_error"].to_list() if e is not None]
    # a value is decoded only when a decoded column is asked for; with a limit, those up to it
    # must be, the ones past it may be (a batch is decoded whole)
    decoded = "value" in columns or "value_schema_id" in columns
    may = decoded and bool(errors)
    must = may if limit is None else decoded and read["value_error"].head(limit).null_count() < min(limit, read.height)
    try:
        got = lf.collect()
    except ValueDecodeError as exc:
        event("raised")
        assert may, exc
        assert str(exc) == errors[0]
        return
    assert not must, f"no error raised; the rows read hold {errors[:3]}"
    event("read without error" + (", bad values among the rows" if may else ""))
    want = read.select(columns) if limit is None else read.select(columns).head(limit)
    assert_frame_equal(got, want)


@SETTINGS
@given(language=LANGUAGE, seed=SEED, terms=TERMS, iso=ISO, good=st.booleans())
def test_a_typed_duckdb_query_equals_the_eager_decode_filtered(tmp_path_factory: pytest.TempPathFactory,
                                                               language: str, seed: int, terms: list, iso: str,
                                                               good: bool) -> None:
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import register

    r, registry = random_root(tmp_path_factory, seed, language)
    con = duckdb.connect()
    register(con, "lazy", r.root, topic=TOPIC, values="auto", errors="null", isolation_level=iso, index=False)
    con.register("eager", eager_frame(r.root, registry, TOPIC, iso).to_arrow())
    where = " AND ".join([sql_term(*t) for t in terms] + (["value_error IS NULL"] if good else [])) or "TRUE"
    # the values compared as DuckDB's JSON of each (the same SQL over the view and over the eager table)
    sql = ('SELECT partition, "offset", timestamp, key, value_schema_id, value_error, to_json(value)::VARCHAR '
           'FROM {} WHERE ' + where + ' ORDER BY partition, "offset"')
    assert con.sql(sql.format("lazy")).fetchall() == con.sql(sql.format("eager")).fetchall()


# ---------------------------------------------------------------- projection

@SETTINGS
@given(language=LANGUAGE, seed=SEED, pick=SEED)
def test_a_projected_decode_equals_the_whole_decode_s_fields(tmp_path_factory: pytest.TempPathFactory,
                                                             language: str, seed: int, pick: int) -> None:
    import json

    from support.avro_random import all_names

    r, registry = random_root(tmp_path_factory, seed, language)
    reader = registry.latest(f"{TOPIC}-value")
    for log in open_logs(r.root, [TOPIC]):
        table = log.to_arrow()
        whole = decode(table, registry, "value", reader, "null")
        if r.language == "avro":
            schema = json.loads(r.schema)
            paths = avro_paths(schema, all_names(schema))
        else:
            paths = struct_paths(whole.column("value").type)
        fields = draw_fields(random.Random(pick), paths)
        part = decode(table, registry, "value", reader, "null", fields=fields)
        assert_projected(whole, part, fields)


# ---------------------------------------------------------------- the time index: same rows, never a stale file

def indexed_query(root: Path, registry: Registry, terms: list, columns: list[str], iso: str, index_dir: Path,
                  index: bool = True) -> tuple[Any, ScanStats, dict[str, list[str]]]:
    """The query's frame, its stats, and the notes of each segment (by path) of a fresh scan."""
    logs = open_logs(root, [TOPIC])
    stats = ScanStats()
    lf = scan_kafka_log(logs, values=registry, errors="null", isolation_level=iso, stats=stats, index=index,
                        index_dir=index_dir)
    for t in terms:
        lf = lf.filter(polars_expr(*t))
    got = lf.select(columns).collect()
    return got, stats, {str(seg.path): list(seg.notes) for log in logs for seg in log.segments}


def index_files(root: Path, index_dir: Path) -> dict[str, Path]:
    """The index file of each segment of the root's topic that has one, by the segment's path."""
    ix = TimeIndexes(index_dir)
    out = {}
    for log in open_logs(root, [TOPIC]):
        for seg in log.segments:
            f = ix.file_for(seg, seg.identity().key)
            if f.exists():
                out[str(seg.path)] = f
    return out


def last_segments(root: Path) -> set[str]:
    return {str(log.segments[-1].path) for log in open_logs(root, [TOPIC]) if log.segments}


def tamper(root: Path, index_dir: Path, how: str, rng: random.Random) -> str | None:
    """Make one segment's index file stale or lying ``how``; that segment's path (None: no file
    that can be made so)."""
    files = index_files(root, index_dir)
    if how == "appended":
        files = {s: f for s, f in files.items() if s in last_segments(root)}
    if how == "another" and len(index_files(root, index_dir)) < 2:
        return None
    if not files:
        return None
    seg = rng.choice(sorted(files))
    f = files[seg]
    if how == "truncated":
        raw = f.read_bytes()
        f.write_bytes(raw[: rng.randrange(len(raw))])
    elif how == "another":
        other = rng.choice(sorted(g for s, g in index_files(root, index_dir).items() if s != seg))
        f.write_bytes(other.read_bytes())
    else:  # a batch appended to the segment (the partition's last): its size changes
        log = next(log for log in open_logs(root, [TOPIC]) if str(log.segments[-1].path) == seg)
        with open(seg, "ab") as out:
            out.write(kbatch.encode([None, b"\x00\x00\x00\x00\x01"], keys=[b"late", b"late"],
                                    base_offset=log.next_offset, timestamps=[BASE_TS + 100, BASE_TS + 7]))
    return seg


@SETTINGS
@given(language=LANGUAGE, seed=SEED, at=st.floats(0, 1), width=st.integers(0, 120),
       which=st.sampled_from(["both", "lo", "hi"]), part=st.none() | st.integers(0, 2), iso=ISO,
       columns=st.sampled_from([["offset", "timestamp"], ["offset", "value", "value_error"], COLUMNS]),
       how=st.sampled_from(["truncated", "another", "appended"]), pick=SEED)
def test_a_windowed_query_reads_the_same_with_the_index_and_never_a_stale_one(
        tmp_path_factory: pytest.TempPathFactory, language: str, seed: int, at: float, width: int, which: str,
        part: int | None, iso: str, columns: list[str], how: str, pick: int) -> None:
    r, registry = random_root(tmp_path_factory, seed, language)
    index_dir = r.root.parent / "index"
    lo = BASE_TS - 5 + round(at * (r.last_ts + 10 - BASE_TS))  # (the window's start: about the root's times)
    terms = window(lo, width, which) + ([] if part is None else [("partition", "=", part % r.partitions)])

    def expected() -> Any:
        want = eager_frame(r.root, registry, TOPIC, iso)
        for t in terms:
            want = want.filter(polars_expr(*t))
        return want.select(columns)

    want = expected()
    first, s1, _ = indexed_query(r.root, registry, terms, columns, iso, index_dir)  # writes the index
    second, s2, _ = indexed_query(r.root, registry, terms, columns, iso, index_dir)  # uses it
    plain, s0, _ = indexed_query(r.root, registry, terms, columns, iso, index_dir, index=False)
    for got in (first, second, plain):
        assert_frame_equal(got, want)
    assert s0.indexes_used == s0.indexes_written == 0
    assert s1.indexes_used == 0 and s1.batches_skipped_by_index == 0
    assert s2.indexes_used == s1.indexes_written == len(index_files(r.root, index_dir)), (s1, s2)
    assert s2.indexes_written == 0, s2  # nothing new learned
    # the index skips batches unread: never more framed than without it
    assert s2.batches_framed + s2.batches_skipped_by_index <= s1.batches_framed + s1.batches_skipped_by_index
    assert s2.batches_framed <= s1.batches_framed
    # a stale or lying file: noted, not used (the others still are), the rows the same
    seg = tamper(r.root, index_dir, how, random.Random(pick))
    event(f"index files: {min(s2.indexes_used, 3)}{'+' if s2.indexes_used >= 3 else ''}; "
          f"{how if seg is not None else 'none tampered with'}")
    if seg is None:
        return
    want = expected()
    third, s3, notes = indexed_query(r.root, registry, terms, columns, iso, index_dir)
    assert_frame_equal(third, want)
    assert any("time index" in n and "not used" in n for n in notes[seg]), notes[seg]
    assert s3.indexes_used == s2.indexes_used - 1, (s2, s3)
    assert not any("time index" in n for s, ns in notes.items() if s != seg for n in ns), notes
    # written anew from what that scan read, and used again
    fourth, s4, notes = indexed_query(r.root, registry, terms, columns, iso, index_dir)
    assert_frame_equal(fourth, want)
    assert not any("time index" in n for ns in notes.values() for n in ns), notes
    assert s4.indexes_used == len(index_files(r.root, index_dir)) >= s2.indexes_used - 1
