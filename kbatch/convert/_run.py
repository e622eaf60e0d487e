"""``kbatch convert ROOT OUT``: a Kafka ``log.dirs`` root to Parquet, ORC or JSON, with Spark or in-process with Arrow.

The README's main job. By default it runs Spark in local mode (``local[*]``): the ``kafka-log``
data source's planner and reader (:mod:`kbatch.spark._frame`), optional filters, and writes the
output partitioned by topic (``OUT/topic=<name>/part-*.parquet``), printing progress and a
summary::

    kbatch convert /var/lib/kafka/data out/ --format parquet
    kbatch convert /var/lib/kafka/data out/ --master spark://host:7077 --subscribe 'orders.*'
    kbatch convert /var/lib/kafka/data out/ --engine arrow     # no Spark, in-process

``--engine arrow`` does the same conversion in this process with pyarrow (Parquet or ORC,
``pyarrow.dataset.write_dataset``), for small data or machines without Java. Both engines
write the same layout and rows.

What holds, for both engines:

- Everything is checked before any work (root, selection, options, OUT and ``--mode``); a
  user mistake is one line on stderr and status 2, a failure while converting one line and
  status 1 (an error kbatch raised in a Spark worker is shown as kbatch's own line).
- Output is written into a hidden folder beside OUT and moved into place only on success
  (:mod:`kbatch.tables._staging`): a failed run leaves OUT as it was, in every mode.
- A root with nothing to convert says what it found instead (deeper logs, internal topics
  only, a subscription matching nothing); internal topics a run leaves out are named.
- The summary counts the records actually written, per partition with the offset range and
  why the two differ (transaction markers, aborted transactions, compaction gaps, corrupt
  bytes skipped), and the wall time with Spark's start-up apart from the job's time and rate.
- ``--compact-after FILES``: after the run's commit, OUT is compacted as ``kbatch compact OUT``
  compacts it once a table holds that many data files (some below 128M); a compaction that fails
  leaves the run's commit standing, and says so (status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kbatch import storage
from kbatch.errors import KBatchError
from kbatch.tables import DEFAULT_TARGET, compact_after, hold, read_recipe, release

from ._arrow_engine import convert_arrow
from ._errors import ConvertError, UsageError
from ._plan import default_engine
from ._sinks import has_ledger, is_remote
from ._spark_engine import convert_spark
from ._summary import Summary

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch convert``; print the summary; return the exit status.

    0 on success, 2 for a user mistake (checked before any work), 1 when the conversion
    failed (corrupt data, Spark); each error is one line on stderr, OUT left as it was.
    """
    default_engine(args)
    existed = is_remote(args.out) or os.path.lexists(args.out)
    failed = False
    try:
        try:
            summary = convert_arrow(args) if args.engine == "arrow" else convert_spark(args)
            if getattr(args, "compact_after", None) and summary.written:
                failed = _compact(args, summary)
        finally:  # the run's lease on OUT (recover_out, the compaction) ends with the run
            release(args.out)
    except UsageError as exc:
        print(f"kbatch convert: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"kbatch convert: error: {exc} (--engine {args.engine} needs it installed)", file=sys.stderr)
        return 2
    except (KBatchError, ConvertError, OSError) as exc:
        print(f"kbatch convert: error: {exc}", file=sys.stderr)
        return 1
    summary.engine_default = args.engine_default
    summary.out_existed = existed
    if args.format == "parquet" and summary.written and has_ledger(args.out):  # local or s3: _common_metadata
        summary.read = read_recipe(args.out, not args.no_partition_by_topic)
    if args.json_summary:
        print(json.dumps(summary.as_dict()))
    elif not args.quiet:
        print("\n".join(summary.lines()))
    if failed:
        print(f"kbatch convert: error: {summary.compacted[-1]}", file=sys.stderr)
        return 1
    return 0


def _compact(args: argparse.Namespace, summary: Summary) -> bool:
    """``--compact-after``: compact OUT once a table holds that many data files (the run's commit
    stands whatever happens here); the lines said in ``summary``; True when it failed."""
    options = storage.parse_options(args.storage_option)
    catalog = dict(item.split("=", 1) for item in args.catalog_option if "=" in item)
    try:
        hold(args.out, options)  # (this run's staging folder is not a dead run's leftover)
        done = compact_after(args.out, args.compact_after, DEFAULT_TARGET, options, catalog)
    except (KBatchError, ValueError, OSError) as exc:
        summary.compacted.append(f"the run's commit stands; compacting {args.out} failed: {exc}")
        return True
    summary.compacted += [c.line() for c in done if c.files_after < c.files_before]
    return False
