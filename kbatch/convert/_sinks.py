"""Where a ``kbatch convert`` run writes: OUT's kind, and the sink that writes it.

A local OUT, or an ``s3://`` one (its conditional writes), goes through a table sink with its
offsets ledger (:func:`has_ledger`, :mod:`kbatch.tables`): a folder of Parquet, ORC or JSON
files, an Iceberg or a Delta table (:func:`open_out_sink`, :func:`table_options`). Into another
remote OUT (no ledger there) the arrow engine's files are staged under OUT and moved in at the
end (:class:`RemoteStaging`). Before OUT is looked at, what dead runs left there is removed and
an S3 OUT leased for the run (:func:`recover_out`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from kbatch import storage
from kbatch._version import __version__
from kbatch.tables import FolderSink, Keyed, RemoteFolderSink, Sink, hold, is_s3, open_sink, recover

from ._errors import UsageError
from ._summary import say

__all__ = ["RemoteStaging", "has_ledger", "is_remote", "open_out_sink", "recover_out", "table_options"]


def is_remote(out: str) -> bool:
    return storage.is_remote(out)


def has_ledger(out: str) -> bool:
    """Whether a run to ``out`` goes through a table sink with its ledger: a local OUT, or S3
    (its conditional writes; other object stores: files copied in, without a ledger)."""
    return not is_remote(out) or is_s3(out)


def recover_out(args: argparse.Namespace, storage_options: dict[str, Any]) -> None:
    """The one recovery step of a run on OUT (:func:`kbatch.tables._leftovers.recover`), said in one line;
    then this run's lease on an S3 OUT (given back when the run ends: :func:`kbatch.convert._run.run`)."""
    try:
        removed = recover(args.out, storage_options, args.format)
    except ImportError:
        raise UsageError(f"{args.out} needs boto3: pip install 'kbatch[s3]'") from None
    if removed:
        more = f" (and {len(removed) - 3} more)" if len(removed) > 3 else ""
        say(args, f"kbatch convert: removed what runs no longer alive left in {args.out}: "
                  f"{', '.join(removed[:3])}{more}")
    if is_s3(args.out):
        hold(args.out, storage_options)


def open_out_sink(args: argparse.Namespace, topics: list[str], columns: list[str],
                  keys: Sequence[tuple[str, int, str | None]] = (), side_folders: Sequence[str] = (),
                  keyed: dict[str, Keyed] | None = None) -> Sink:
    """The table sink of ``--format`` (:mod:`kbatch.tables`) for OUT and ``--mode``; ``keys``: the
    partitions the run converts; ``side_folders``: hidden folders of a Parquet OUT committed with
    the data (dead letters); ``keyed``: ``--cdc``'s changes by each topic's key."""
    storage_options = storage.parse_options(args.storage_option)
    folder = {"compression": args.compression, "max_rows_per_file": args.max_rows_per_file,
              "row_group_rows": args.row_group_rows, "partition_by_topic": not args.no_partition_by_topic,
              "format": args.format}
    if args.format in ("parquet", "orc", "json") and is_remote(args.out):
        try:
            import boto3  # noqa: F401 - the ledger's conditional write
        except ImportError:
            raise UsageError(f"{args.out} with its offsets ledger needs boto3: pip install 'kbatch[s3]'") from None
        try:
            return RemoteFolderSink(args.out, args.mode, storage_options=storage_options, side_folders=side_folders,
                                    **folder)
        except (FileExistsError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if args.format in ("parquet", "orc", "json"):  # a folder: Parquet written by the sink, or files put there
        return FolderSink(args.out, args.mode, side_folders=side_folders, **folder)
    own = table_options(args, keys)
    try:
        return open_sink(args.format, args.out, args.mode, topics=topics, partition_by=args.partition_by,
                         columns=columns, compression=args.compression, upsert=keyed or args.upsert,
                         properties={"kbatch.version": __version__, "kbatch.source-root": str(args.root)}, **own)
    except ImportError as exc:
        raise UsageError(f"--format {args.format} needs {exc.name or exc}: "
                         f"pip install 'kbatch[{args.format}]'") from None
    except (FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def table_options(args: argparse.Namespace, keys: Sequence[tuple[str, int, str | None]] = ()) -> dict[str, Any]:
    """The Iceberg or Delta sink's own options for OUT: the catalog (Iceberg), the partitions the
    run converts (Delta: ``keys``, whose ledger survives log cleanup), the storage options of a
    remote OUT. The data's tables and the dead letters' are opened with the same."""
    options = {}
    for item in args.catalog_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--catalog-option needs KEY=VALUE, got {item!r}")
        options[key.strip()] = value.strip()
    catalog = {"catalog": args.catalog, "catalog_options": options, "namespace": args.namespace}
    own: dict[str, Any] = catalog if args.format == "iceberg" else {"partitions": list(keys)}
    if is_remote(args.out):
        own["storage_options"] = storage.parse_options(args.storage_option)
    return own


class RemoteStaging:
    """:class:`StagedOutput` for an OUT on a remote filesystem (pyarrow.fs): files are written
    under ``OUT/_kbatch-staging-<token>/`` and moved into OUT only when the whole conversion
    succeeded (removed otherwise). Object stores have no atomic rename: the moves are object
    copies, so a reader listing OUT during those moves may see part of the files."""

    def __init__(self, out: str, mode: str, storage_option: Sequence[str]) -> None:
        import pyarrow.fs as pafs

        loc = storage.locate(out, storage_options=storage.parse_options(storage_option))
        self.fs, self.out, self.mode = loc.fs, loc.path, mode
        self.token = os.urandom(4).hex()
        self.tmp = f"{self.out}/_kbatch-staging-{self.token}"
        self._discarded = False
        try:
            existing = [i for i in self.fs.get_file_info(pafs.FileSelector(self.out, recursive=True,
                                                                            allow_not_found=True))
                        if i.type == pafs.FileType.File]
        except OSError as exc:
            raise UsageError(f"cannot list {out}: {exc}") from None
        if existing and mode == "errorifexists":
            raise UsageError(f"{out} exists and holds files: use --mode overwrite or append")

    def __enter__(self) -> str:
        return self.tmp

    def has_data(self) -> bool:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.tmp, recursive=True, allow_not_found=True))
        return any(i.type == pafs.FileType.File for i in infos)

    def discard(self) -> None:
        self._discarded = True

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        import pyarrow.fs as pafs

        try:
            if exc_type is None and not self._discarded:
                if self.mode == "overwrite":
                    for i in self.fs.get_file_info(pafs.FileSelector(self.out, recursive=True, allow_not_found=True)):
                        if i.type == pafs.FileType.File and not i.path.startswith(self.tmp + "/"):
                            self.fs.delete_file(i.path)
                for i in self.fs.get_file_info(pafs.FileSelector(self.tmp, recursive=True)):
                    if i.type == pafs.FileType.File:
                        self.fs.move(i.path, self.out + i.path[len(self.tmp):])
        finally:
            if self.fs.get_file_info(self.tmp).type != pafs.FileType.NotFound:
                self.fs.delete_dir(self.tmp)
