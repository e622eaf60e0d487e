"""``kbatch convert --as-of TIMESTAMP|OFFSETS`` (with ``--upsert`` or ``--cdc``): the table as it stood then.

- ``--as-of '{"t": {"0": 9}}'``: the records before those offsets (Kafka's ``endingOffsets``,
  exclusive: offset 9 is not applied);
- ``--as-of 1700000000000`` (milliseconds since the epoch) or ``--as-of 2026-01-31T12:00:00Z``
  (ISO 8601; UTC when no zone is given): by ``--as-of-by``:

  - ``timestamp`` (the default): each partition up to its first record whose timestamp is later
    (Kafka's ``offsetsForTimes``: the run's ``--ending-timestamp`` is the time plus 1 ms);
  - ``source.ts_ms`` (when the database made the change) or ``ts_ms`` (when Debezium read it),
    with ``--cdc``: each partition up to its first change whose envelope's time is later; the
    records after it are left out, dead letters too.

The ledger ends where the table stands, per partition, so a later ``--mode append`` run (without
``--as-of``, or with a later one) carries the table forward from there, each record once.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from ._values import usage

__all__ = ["AS_OF_BY", "check_as_of"]

#: What a time ``--as-of`` is compared with.
AS_OF_BY = ("timestamp", "source.ts_ms", "ts_ms")


def _millis(text: str) -> int | None:
    """``text`` as milliseconds since the epoch (digits, or ISO 8601), or None when it is neither."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def check_as_of(args: argparse.Namespace) -> None:
    """``--as-of`` checked and turned into the run's end: ``--ending-offsets``,
    ``--ending-timestamp``, or (``--as-of-by source.ts_ms|ts_ms``) ``args.as_of_ms`` for the
    change stream (:class:`kbatch.convert._cdc.CdcPlan`). Raises the convert's ``UsageError``."""
    args.as_of_ms = None
    given = getattr(args, "as_of", None)
    by = getattr(args, "as_of_by", None)
    if given is None:
        if by is not None:
            raise usage("--as-of-by needs --as-of TIMESTAMP")
        return
    if not (getattr(args, "upsert", False) or getattr(args, "cdc", None)):
        raise usage("--as-of is the table as it stood then: it needs --upsert or --cdc (an append-only table is "
                    "cut by --ending-offsets or --ending-timestamp)")
    if args.ending_offsets is not None or args.ending_timestamp is not None:
        raise usage("--as-of sets where the run ends: leave out --ending-offsets and --ending-timestamp")
    if given.strip().startswith("{"):
        try:
            offsets = json.loads(given)
        except ValueError as exc:
            raise usage(f"--as-of {given}: not JSON offsets ({exc})") from None
        if not isinstance(offsets, dict):
            raise usage('--as-of offsets are {"topic": {"partition": offset}}')
        if by is not None:
            raise usage("--as-of-by is for a time, not offsets")
        args.ending_offsets = given
        return
    ms = _millis(given)
    if ms is None:
        raise usage(f"--as-of {given}: give milliseconds since the epoch, an ISO 8601 time "
                    '(2026-01-31T12:00:00Z) or offsets {"topic": {"0": 9}}')
    if by in (None, "timestamp"):
        args.ending_timestamp = ms + 1  # the records of that millisecond applied
        return
    if not getattr(args, "cdc", None):
        raise usage(f"--as-of-by {by} is a Debezium envelope's time: it needs --cdc debezium")
    args.as_of_ms = ms
