"""The one recovery step of every run on an OUT: what runs no longer alive left, removed (:func:`recover`).

A run killed at any point (``kill -9``, a lost node, a scheduler's timeout) leaves nothing a
reader sees, but it may leave (names in :mod:`kbatch.tables._runs`):

- beside a local OUT, ``.<OUT>.kbatch-<run>.tmp`` (a new OUT or an overwrite being written)
  and ``.<OUT>.kbatch-<run>.old`` (an overwrite's old OUT between two renames);
- ``OUT/_kbatch_staging/<run>/`` (files not yet committed: Parquet appends, Spark's task files
  and ``_temporary`` folders for every format; on S3 its directory-marker objects too) and the
  run's lease ``OUT/_kbatch_staging/<run>.lease``;
- ``OUT/_kbatch_ledger/.<n>.json.<run>.tmp`` (a Parquet ledger file before its link);
- a Delta table's ``part-<run>_*.parquet`` data files that no version of the table names yet.

:func:`recover` runs at the start of every ``kbatch convert`` on OUT (local or ``s3://``), before
this run writes anything: it removes the leftovers of every run that is dead
(:func:`kbatch.tables._runs.is_dead`: its process gone on this host, or its lease expired), never a
live run's, and never a staging folder that the last ledger commit still names (the Parquet
sink moves its files in: the roll forward). An overwrite killed between its two renames, with
OUT gone, is rolled forward (the complete new OUT renamed into place). It returns what it
removed, which the run reports in one line.

Files of a table that no snapshot references and that carry no run's name (Iceberg's data and
manifest files of a run killed before its commit) are ``kbatch clean``'s (:mod:`kbatch.cli._clean`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._folder import LEDGER_DIR, STAGING_DIR
from ._remote import delta_options, is_s3, s3_client, split_url
from ._runs import LEASE_SUFFIX, Lease, LeaseInfo, is_dead, parse_run

__all__ = ["Store", "hold", "recover", "release"]


class Store:
    """The objects under OUT, a local folder or ``s3://bucket/prefix`` (through boto3: S3's own
    listing shows the directory-marker objects that pyarrow's hides), by path relative to OUT."""

    def __init__(self, out: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = os.fspath(out).rstrip("/")
        self.remote = is_s3(self.url)
        if self.remote:
            self.client = s3_client(storage_options or {})
            _, self.bucket, self.prefix = split_url(self.url)
        else:
            self.root = Path(self.url)

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def objects(self, under: str = "") -> list[tuple[str, float]]:
        """``(path relative to OUT, modification time)`` of every object under ``OUT/under``: the
        files, and on S3 the directory markers (their names end with ``/``)."""
        if not self.remote:
            base = self.root / under
            out = []
            for dirpath, _dirs, files in os.walk(base):
                for name in files:
                    p = Path(dirpath) / name
                    with contextlib.suppress(FileNotFoundError):
                        out.append((p.relative_to(self.root).as_posix(), p.stat().st_mtime))
            return sorted(out)
        prefix = self._key(under).rstrip("/") + "/" if under or self.prefix else ""
        out, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = self.client.list_objects_v2(**kw)
            cut = len(self.prefix) + 1 if self.prefix else 0
            out += [(o["Key"][cut:], o["LastModified"].timestamp()) for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(out)
            token = page["NextContinuationToken"]

    def read(self, rel: str) -> bytes | None:
        """The object's bytes (None when it is gone)."""
        if not self.remote:
            try:
                return (self.root / rel).read_bytes()
            except FileNotFoundError:
                return None
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=self._key(rel))["Body"].read())
        except self.client.exceptions.NoSuchKey:
            return None

    def put(self, rel: str, data: bytes) -> None:
        """Write (or replace) one object; a local folder is made as needed."""
        if not self.remote:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            return
        self.client.put_object(Bucket=self.bucket, Key=self._key(rel), Body=data)

    def delete(self, rels: list[str]) -> None:
        """Delete objects (gone already: fine); locally, the folders they leave empty up to OUT."""
        if not self.remote:
            for rel in rels:
                path = self.root / rel
                path.unlink(missing_ok=True)
                for parent in path.parents:
                    if parent == self.root or self.root not in parent.parents:
                        break
                    try:
                        parent.rmdir()
                    except OSError:
                        break
            return
        for i in range(0, len(rels), 1000):
            chunk = [{"Key": self._key(rel)} for rel in rels[i:i + 1000]]
            if chunk:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})

    def remove_tree(self, rel: str) -> None:
        """Delete the folder ``OUT/rel`` and everything in it (on S3: its objects and markers)."""
        if not self.remote:
            shutil.rmtree(self.root / rel, ignore_errors=True)
            with contextlib.suppress(OSError):
                (self.root / rel).parent.rmdir()  # _kbatch_staging, when it is left empty
            return
        self.delete([r for r, _ in self.objects(rel)] + [rel.rstrip("/") + "/"])


def leases(store: Store) -> dict[str, tuple[str, LeaseInfo]]:
    """run id -> (the lease's path, its content) of every readable lease under ``_kbatch_staging``."""
    out = {}
    for rel, _ in store.objects(STAGING_DIR):
        if rel.endswith(LEASE_SUFFIX) and rel.count("/") == 1:
            raw = store.read(rel)
            info = LeaseInfo.from_json(raw) if raw is not None else None
            if info is not None:
                out[info.run] = (rel, info)
    return out


def _pending(store: Store) -> str | None:
    """The staging folder the last Parquet ledger commit names (its files are moved in by the
    sink's roll forward, never deleted), or None."""
    numbered = [rel for rel, _ in store.objects(LEDGER_DIR)
                if rel.count("/") == 1 and rel.endswith(".json") and rel.split("/")[1][:-5].isdigit()]
    if not numbered:
        return None
    raw = store.read(max(numbered, key=lambda r: int(r.split("/")[1][:-5])))
    try:
        staging = json.loads(raw or b"{}").get("staging")
    except (ValueError, AttributeError):
        return None
    return str(staging) if staging else None


def _beside(out: Path) -> list[str]:
    """The leftovers of dead runs beside a local OUT; an overwrite killed between its renames
    (OUT gone, its new content complete in the ``.tmp``) is rolled forward first."""
    parent, prefix = out.parent, f".{out.name}.kbatch-"
    if not parent.is_dir():
        return []
    found: dict[str, dict[str, Path]] = {}
    for p in parent.iterdir():
        if p.name.startswith(prefix) and p.name.endswith((".tmp", ".old")):
            run = parse_run(p.name[len(prefix):-4])
            if run is not None and is_dead(run, {}):
                found.setdefault(run[0], {})[p.name[-3:]] = p
    removed = []
    for kinds in found.values():
        if "old" in kinds and "tmp" in kinds and not out.exists() and (kinds["tmp"] / LEDGER_DIR).is_dir():
            os.rename(kinds.pop("tmp"), out)  # the overwrite's commit point had passed: roll forward
        for p in kinds.values():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    return removed


def _delta_files(store: Store, leases: Mapping[str, LeaseInfo], storage_options: Mapping[str, Any] | None
                 ) -> list[str]:
    """A Delta table's data files of dead runs (their names carry the run) that no commit of its
    log names (the topics' tables are OUT's folders holding ``_delta_log``; a file removed by a
    later commit stays for time travel, ``kbatch clean``'s once older than the retention)."""
    from urllib.parse import quote, unquote

    from deltalake import DeltaTable

    by_table: dict[str, list[str]] = {}
    for rel, _ in store.objects():
        top, _, rest = rel.partition("/")
        name = rest.rsplit("/", 1)[-1]
        if top.startswith(("_", ".")) or not name.startswith("part-") or "/_delta_log/" in f"/{rest}":
            continue
        run = parse_run(name[len("part-"):].split("_", 1)[0])  # part-<run>_... (a host has no _)
        if run is not None and is_dead(run, leases):
            by_table.setdefault(top, []).append(rel)
    removed = []
    for top, rels in by_table.items():
        uri = f"{store.url}/{top}"
        options = delta_options(uri, storage_options or {}) if store.remote else None
        named: set[str] = set()
        if DeltaTable.is_deltatable(uri, storage_options=options):
            uris = DeltaTable(uri, storage_options=options).file_uris()
            named = {f"{top}/{unquote(u.rsplit(f'/{top}/', 1)[-1])}" for u in uris}
        gone = [rel for rel in rels if rel not in named]
        if gone:  # a file a commit of the log ever named (then an overwrite removed) is history's: kept
            log = b"".join(store.read(r) or b"" for r, _ in store.objects(f"{top}/_delta_log") if r.endswith(".json"))
            gone = [rel for rel in gone if rel.rsplit("/", 1)[-1].encode() not in log
                    and quote(rel.rsplit("/", 1)[-1]).encode() not in log]
        store.delete(gone)
        removed += gone
    return removed


def recover(out: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
            format: str | None = None) -> list[str]:
    """Remove what dead runs left on ``out`` (see the module's notes); return what was removed
    (paths relative to OUT, or absolute beside it)."""
    store = Store(out, storage_options)
    removed = [] if store.remote else _beside(Path(store.url))
    if not store.remote and not store.root.is_dir():
        return removed
    held = leases(store)
    infos = {rid: info for rid, (_, info) in held.items()}
    pending = _pending(store)
    dead_leases = {rid: rel for rid, (rel, info) in held.items() if is_dead((rid, info.pid, info.host), infos)}
    staged: set[str] = set()
    if not store.remote and (store.root / STAGING_DIR).is_dir():  # empty folders too
        staged = {p.name for p in (store.root / STAGING_DIR).iterdir() if p.is_dir()}
    for rel, _ in store.objects(STAGING_DIR):
        parts = rel.split("/")
        if len(parts) >= 2 and parts[1] and not (len(parts) == 2 and rel.endswith(LEASE_SUFFIX)):
            staged.add(parts[1])
    for name in sorted(staged):
        run = parse_run(name)
        if run is not None and is_dead(run, infos) and f"{STAGING_DIR}/{name}" != pending:
            store.remove_tree(f"{STAGING_DIR}/{name}")
            removed.append(f"{STAGING_DIR}/{name}/")
    for rel, _ in store.objects(LEDGER_DIR):
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") and name.endswith(".tmp"):
            run = parse_run(name[:-4].split(".json.", 1)[-1])
            if run is not None and is_dead(run, infos):
                store.delete([rel])
                removed.append(rel)
    if format == "delta":
        removed += _delta_files(store, infos, storage_options)
    for rel in dead_leases.values():  # last: a recovery cut short is done again by the next run
        store.delete([rel])
        removed.append(rel)
    if store.remote:  # the empty staging folder's marker, when no run is left in it
        left = store.objects(STAGING_DIR)
        if left and all(r.rstrip("/") == STAGING_DIR for r, _ in left):
            store.delete([r for r, _ in left])
    return removed


_held: dict[str, Lease] = {}


def hold(out: str, storage_options: Mapping[str, Any] | None = None) -> Lease:
    """This process's lease on ``out``: taken once, renewed, given back by :func:`release` when
    the run ends (and at the latest when the process exits)."""
    import atexit

    url = os.fspath(out).rstrip("/")
    if url not in _held:
        _held[url] = Lease(Store(url, storage_options), STAGING_DIR).take()
        atexit.register(release, url, quiet=True)
    return _held[url]


def release(out: str, *, quiet: bool = False) -> None:
    """Give back this process's lease on ``out``, if it holds one: a run that ended leaves no
    lease behind (a process that converts again takes a new one). ``quiet``: at the process's
    exit, a store that cannot be reached is left to the lease's expiry, without a traceback."""
    lease = _held.pop(os.fspath(out).rstrip("/"), None)
    if lease is not None:
        if not quiet:
            lease.release()
            return
        with contextlib.suppress(Exception):  # at exit: an unreachable store lets the lease expire
            lease.release()
