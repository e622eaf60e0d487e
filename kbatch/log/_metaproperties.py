"""A ``log.dirs`` root's ``meta.properties``: which cluster the root's logs belong to.

Grammar (Kafka's ``MetaProperties``, written with ``java.util.Properties.store``)::

    <root>/meta.properties     "#" or "!" comment lines, then "key=value" lines
        version         0 (ZooKeeper brokers) or 1 (KRaft)
        cluster.id      the cluster's id (base64url Uuid); optional in version 0
        broker.id       version 0: the broker's id
        node.id         version 1: the node's id
        directory.id    version 1, Kafka 3.7+: this log directory's own Uuid

Two partition directories named alike are copies of one log only when their roots'
``cluster.id`` agree (and their topic ids: :mod:`kbatch.log._replicas`). Only ``cluster.id`` is
read here; a missing or unreadable file gives None (the caller says what it decided then).

>>> parse_meta_properties(b"#Written\\nversion=1\\nnode.id=3\\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\\n")
{'version': '1', 'node.id': '3', 'cluster.id': 'MkU3OEVBNTcwNTJENDM2Qk'}
"""

from __future__ import annotations

import os
import threading
from typing import Final

from kbatch.storage import Location, join, read_small

__all__ = ["META_PROPERTIES", "cluster_id", "parse_meta_properties"]

META_PROPERTIES: Final = "meta.properties"

_cache: dict[str, tuple[tuple[int, int, int] | None, str | None]] = {}
_lock = threading.Lock()


def parse_meta_properties(raw: bytes) -> dict[str, str]:
    """The ``key=value`` pairs of a ``meta.properties`` file's bytes (``key: value`` too, as
    ``java.util.Properties`` reads it); comments and blank lines left out."""
    out: dict[str, str] = {}
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            continue
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def cluster_id(root: Location) -> str | None:
    """``cluster.id`` of the root's ``meta.properties``, or None when the file or key is missing.

    Cached per root: a local root while the file's inode, size and modification time stay
    the same; a remote root once per process (one small read).
    """
    path = join(root, META_PROPERTIES)
    stamp = _stamp(path.path) if root.fs is None else (0, 0, 0)
    key = path.url if root.fs is None else f"{id(root.fs)}:{path.url}"
    with _lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    raw = read_small(path) if stamp is not None else None
    found = None if raw is None else (parse_meta_properties(raw).get("cluster.id") or None)
    with _lock:
        _cache[key] = (stamp, found)
    return found
