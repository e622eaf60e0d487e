"""Partition directories named alike under several roots: copies of one log, or different logs.

Two directories with the same ``<topic>-<partition>`` are replicas (copies of one log) only
when their roots' ``cluster.id`` (``meta.properties``) and their topic ids
(``partition.metadata``) are the same. Otherwise they are different logs: another cluster
(two clusters' ``log.dirs`` in one backup), or a topic deleted and created again under the
same name (a new topic id). Different logs are all read, each over its own range; a note
says so and which roots they are (readers tell the rows apart by the root, and the cluster id).

A side without the file: an id missing on one side and present on the other makes the two
different logs (both are read: rows twice rather than rows lost); an id missing on both
sides does not tell them apart (copies of one log, as before either file existed), and the
check below then catches copies that are not. A copy in tiered storage's layout
(``<topic>-<topic id>/<partition>``) has no root files, hence no cluster id: its topic id
(in its path) decides, and it joins the one log of that topic id (on its own when several
clusters' logs have that topic id).

Of the replicas of one log, the copy read is the one with the highest log end offset; a tie
goes to the newest leader epoch in its ``leader-epoch-checkpoint``, then to the first root in
path order. Where copies overlap they must hold the same batches: for every offset both hold,
the batch holding it has the same base offset and CRC in each (the CRC covers the batch from
its attributes on, so equal CRCs mean equal records). A difference names the partition and
the first offset where the copies part: it raises :class:`~kbatch.errors.ReplicasDisagreeError`
(``on_disagreement="raise"``) or is a note (``"note"``, and always when every copy is read),
never resolved silently.

Works on any objects with ``topic``, ``partition``, ``root``, ``url``, ``cluster_id``,
``topic_id``, ``tiered``, ``next_offset``, ``log_start_offset``, ``leader_epochs``,
``scan(on_corruption)`` and ``close()`` (:class:`kbatch.log.LogDir`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from kbatch.errors import ReplicasDisagreeError

__all__ = ["OnDisagreement", "choose", "disagreement", "identity"]

OnDisagreement = Literal["raise", "note"]


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


def identity(log: Any) -> tuple[str | None, str | None]:
    """(cluster id, topic id) of a partition directory: equal for the copies of one log
    (None for an id whose file is missing; two Nones are equal, see the module docstring)."""
    return log.cluster_id, log.topic_id


def _describe(log: Any) -> str:
    cluster, topic_id = identity(log)
    none = "none: tiered storage" if log.tiered else "unknown: no meta.properties"
    return f"{log.root} (cluster {cluster or none}, topic id {topic_id or 'unknown: no partition.metadata'})"


def _split(named: Sequence[Any]) -> list[list[Any]]:
    """Directories named alike split into logs (each list: the copies of one log, by root)."""
    by_log: dict[tuple[str | None, str | None], list[Any]] = {}
    for log in named:
        if not log.tiered:
            by_log.setdefault(identity(log), []).append(log)
    for log in named:
        if log.tiered:  # no cluster id to compare: the one log of its topic id
            same = [key for key in by_log if key[1] == log.topic_id]
            by_log.setdefault(same[0] if len(same) == 1 else (None, log.topic_id), []).append(log)
    return [sorted(copies, key=lambda d: d.root) for copies in by_log.values()]


def _why_apart(logs: Sequence[Any]) -> str:
    clusters = {identity(d)[0] for d in logs if not d.tiered}
    topic_ids = {identity(d)[1] for d in logs}
    why = []
    if len(clusters) > 1:
        why.append("cluster ids differ" if None not in clusters else "a root has no meta.properties")
    if len(topic_ids) > 1 and None in topic_ids:
        why.append("a copy has no partition.metadata")
    elif len(topic_ids) > 1:
        why.append("topic ids differ" + ("" if len(clusters) > 1 else ": the topic was deleted and created again"))
    return ", ".join(why)


def choose(
    logs: Sequence[Any], *, keep_all: bool, verify: bool, on_disagreement: OnDisagreement = "raise"
) -> tuple[list[Any], list[str]]:
    """The logs to read and notes saying what was chosen, what was not, and why.

    Directories named alike are split by :func:`identity`: each different log is read; of
    the replicas of one log, one (the best) or all with ``keep_all``. ``logs`` sorted by
    topic, partition, root; so is the result. Logs not chosen are closed.

    Raises
    ------
    ReplicasDisagreeError
        ``verify`` and ``on_disagreement="raise"`` (and not ``keep_all``, which reads every
        copy): two replicas of one log hold different batches at an offset both hold.
    """
    if on_disagreement not in ("raise", "note"):
        raise ValueError(f"on_disagreement must be 'raise' or 'note', got {on_disagreement!r}")
    groups: dict[tuple[str, int], list[Any]] = {}
    for log in logs:
        groups.setdefault((log.topic, log.partition), []).append(log)
    out: list[Any] = []
    notes: list[str] = []
    try:
        for (topic, partition), named in groups.items():
            split = _split(named)
            if len(split) > 1:
                notes.append(
                    f"{topic}-{partition}: {len(split)} different logs under one name, not replicas "
                    f"({_why_apart([c[0] for c in split])}): " + "; ".join(_describe(c[0]) for c in split)
                    + "; each is read (rows: the root and clusterId columns)"
                )
            for copies in split:
                out.extend(_one_log(topic, partition, copies, keep_all, verify, on_disagreement, notes))
    except BaseException:
        for log in logs:
            log.close()
        raise
    out.sort(key=lambda d: (d.topic, d.partition, d.root))
    return out, notes


def _one_log(topic: str, partition: int, copies: list[Any], keep_all: bool, verify: bool,
             on_disagreement: OnDisagreement, notes: list[str]) -> list[Any]:
    """The copies of one log to read (one, or all with ``keep_all``); the rest closed."""
    if len(copies) == 1:
        return copies
    best = max(copies, key=_rank)  # max keeps the first of equals: the first root
    others = [c for c in copies if c is not best]
    if keep_all:
        notes.append(f"{topic}-{partition}: {len(copies)} replicas, all read (roots "
                     + ", ".join(c.root for c in copies) + ")")
    else:
        end, epoch = _rank(best)
        notes.append(
            f"{topic}-{partition}: {len(copies)} replicas; read {best.url} (log end offset {end}, "
            f"leader epoch {epoch}); not read: "
            + ", ".join(f"{c.url} (log end offset {_rank(c)[0]}, leader epoch {_rank(c)[1]})" for c in others)
        )
    if verify:
        for other in others:
            at = disagreement(best, other)
            if at is None:
                continue
            what = (f"{topic}-{partition}: replicas disagree from offset {at}: {best.url} and {other.url} "
                    f"hold different batches there (base offset or CRC)")
            if keep_all or on_disagreement == "note":
                notes.append(what + ("" if keep_all else f"; read {best.url} (the longest)"))
                continue
            cluster, topic_id = identity(best)
            raise ReplicasDisagreeError(
                f"{what}, yet both are copies of one log (cluster {cluster or 'unknown'}, topic id "
                f"{topic_id or 'unknown'}): convert each root alone to compare them, or read every copy "
                "(--replicas all), or read the longest and report this (--no-fail-on-data-loss; "
                "the kafka-log option failOnDataLoss=false)",
                topic=topic, partition=partition, offset=at, urls=(best.url, other.url),
            )
    if keep_all:
        return copies
    for c in others:
        c.close()
    return [best]
