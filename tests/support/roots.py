"""``log.dirs`` roots for tests of backups holding several roots: copies of one log, or not."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import kbatch
from kbatch.log import LogWriter

#: One topic id (base64url Uuid), for copies of one log.
TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"


def write_root(
    root: Path,
    values: Sequence[bytes],
    *,
    cluster_id: str | None = "cluster-one",
    topic_id: str = TOPIC_ID,
    topic: str = "t",
    partition: int = 0,
    epoch: int = 0,
    segment_bytes: int = 400,
) -> Path:
    """A ``log.dirs`` root holding ``<topic>-<partition>`` with one record per value (offsets
    0, 1, ...), the topic id in ``partition.metadata`` and, unless ``cluster_id`` is None, a
    ``meta.properties`` naming the cluster (as a KRaft broker writes it). Returns ``root``.
    Written again, the partition is written anew (a LogWriter would continue it)."""
    shutil.rmtree(root / f"{topic}-{partition}", ignore_errors=True)
    with LogWriter(root, topic, partition, segment_bytes=segment_bytes, topic_id=topic_id) as w:
        for i, value in enumerate(values):
            w.append(kbatch.encode([value], base_offset=i, timestamps=[1000 + i]), leader_epoch=epoch)
    if cluster_id is not None:
        (root / "meta.properties").write_text(
            f"#\n#Tue Nov 24 10:00:00 UTC 2026\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\nversion=1\n"
            f"cluster.id={cluster_id}\n"
        )
    return root


def values(n: int, seed: bytes = b"v") -> list[bytes]:
    """``[seed + b"0", seed + b"1", ...]``."""
    return [seed + b"%d" % i for i in range(n)]
