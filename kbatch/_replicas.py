"""Several copies of one partition (replicas from several brokers' ``log.dirs``): which to read.

The copy read is the one with the highest log end offset; a tie goes to the newest leader
epoch in its ``leader-epoch-checkpoint``, then to the first root in path order. Where copies
overlap they must hold the same batches: for every offset both hold, the batch holding it has
the same base offset and CRC in each (the CRC covers the batch from its attributes on, so equal
CRCs mean equal records). A difference is reported with the partition and the first offset
where the copies part, never resolved silently.

Works on any objects with ``topic``, ``partition``, ``root``, ``url``, ``next_offset``,
``log_start_offset``, ``leader_epochs`` and ``scan(on_corruption)`` (:class:`kbatch.log.LogDir`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["choose", "disagreement"]

logger = logging.getLogger("kbatch.log")


def _rank(log: Any) -> tuple[int, int]:
    epoch = max((e for e, _ in log.leader_epochs), default=-1)
    return int(log.next_offset), epoch


def disagreement(a: Any, b: Any) -> int | None:
    """The first offset both logs hold whose batches differ (base offset or CRC), or None."""
    ha, hb = a.scan("skip"), b.scan("skip")
    lo = max(int(a.log_start_offset), int(b.log_start_offset))
    hi = min(int(a.next_offset), int(b.next_offset))
    if lo >= hi:
        return None

    def window(h: Any) -> Any:
        last = h["base_offset"] + h["last_offset_delta"]
        keep = (last >= lo) & (h["base_offset"] < hi)
        return h[keep]

    wa, wb = window(ha), window(hb)
    n = min(len(wa), len(wb))
    same = (wa["base_offset"][:n] == wb["base_offset"][:n]) & (wa["crc"][:n] == wb["crc"][:n])
    bad = np.flatnonzero(~same)
    if len(bad):
        k = int(bad[0])
        return max(lo, int(min(wa["base_offset"][k], wb["base_offset"][k])))
    if len(wa) != len(wb):
        longer = wa if len(wa) > len(wb) else wb
        return max(lo, int(longer["base_offset"][n]))
    return None


def choose(logs: Sequence[Any], *, keep_all: bool, verify: bool) -> tuple[list[Any], list[str]]:
    """The logs to read (one per partition, or all with ``keep_all``) and notes saying what was
    chosen, what was not, and where replicas disagree. ``logs`` sorted by topic, partition, root."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for log in logs:
        groups.setdefault((log.topic, log.partition), []).append(log)
    out: list[Any] = []
    notes: list[str] = []
    for (topic, partition), copies in groups.items():
        if len(copies) == 1:
            out.extend(copies)
            continue
        best = max(copies, key=_rank)  # max keeps the first of equals: the first root
        others = [c for c in copies if c is not best]
        if keep_all:
            out.extend(copies)
            notes.append(f"{topic}-{partition}: {len(copies)} replicas, all read (roots "
                         + ", ".join(c.root for c in copies) + ")")
        else:
            out.append(best)
            end, epoch = _rank(best)
            notes.append(
                f"{topic}-{partition}: {len(copies)} replicas; read {best.url} (log end offset {end}, "
                f"leader epoch {epoch}); not read: "
                + ", ".join(f"{c.url} (log end offset {_rank(c)[0]}, leader epoch {_rank(c)[1]})" for c in others)
            )
        if verify:
            for other in others:
                at = disagreement(best, other)
                if at is not None:
                    note = (f"{topic}-{partition}: replicas disagree from offset {at}: {best.url} and "
                            f"{other.url} hold different batches there (base offset or CRC)")
                    logger.warning(note)
                    notes.append(note)
        if not keep_all:
            for c in others:
                c.close()
    return out, notes
