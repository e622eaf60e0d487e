"""Which run wrote a leftover, and whether that run is still alive: run ids, leases, liveness.

Every ``kbatch convert`` process is one run, named ``<pid>-<token>`` (:func:`run_id`, a random
token per process) and, with its host, ``<pid>-<token>@<host>``. The names of what a run leaves
while it works carry its id:

    .<OUT>.kbatch-<pid>-<token>@<host>.tmp          a new OUT (or an overwrite) being written
    OUT/_kbatch_staging/<pid>-<token>[.k]@<host>/    files not yet committed (Parquet, Spark)
    OUT/_kbatch_ledger/.<n>.json.<run>.tmp           a ledger file between write and link
    OUT/<topic>/part-<pid>-<token>.<k>@<host>_*      a Delta table's data files

and, for as long as the run works on OUT, its **lease**
``OUT/_kbatch_staging/<pid>-<token>@<host>.lease`` (:class:`Lease`), a small JSON object::

    {"run": "<pid>-<token>", "host": "...", "pid": 123, "started": 1.7e9, "expires": 1.7e9}

renewed by a background thread every third of :data:`LEASE_SECONDS`. A run is **dead**
(:func:`is_dead`) when its lease says so: on this host its process is gone (``kill(pid, 0)``),
on any host its lease expired unrenewed (an object store, where no pid can be checked, or a
disk shared by hosts). Without a lease (older kbatch) only this host's runs are judged, by pid.
A live run's leftovers are never dead: a pid that is alive counts as alive even when reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["LEASE_SECONDS", "LEASE_SUFFIX", "Lease", "LeaseInfo", "alive", "is_dead", "parse_run", "run_id",
           "run_name"]

#: How long a lease lasts unrenewed (a live run renews it every third of that).
LEASE_SECONDS: Final = float(os.environ.get("KBATCH_LEASE_SECONDS", 600))
#: The name ending of a lease object.
LEASE_SUFFIX: Final = ".lease"

_token: tuple[int, str] = (-1, "")
_counter = 0


def run_id() -> str:
    """This process's run id, ``<pid>-<token>`` (a new token after a fork)."""
    global _token
    if _token[0] != os.getpid():
        _token = (os.getpid(), uuid.uuid4().hex[:8])
    return f"{_token[0]}-{_token[1]}"


def host() -> str:
    """This host's name, as runs record it."""
    return socket.gethostname()


def run_name() -> str:
    """A new staging folder's name of this run, ``<pid>-<token>.<k>@<host>`` (``k`` counts the
    folders this process named: two sinks on one OUT never share one)."""
    global _counter
    _counter += 1
    return f"{run_id()}.{_counter}@{host()}"


def parse_run(name: str) -> tuple[str, int, str | None] | None:
    """``(run id, pid, host or None)`` of a leftover's name part (``<pid>-<token>[.k][@<host>]``,
    any prefix and suffix cut by the caller), or None when it is not one.

    >>> parse_run("123-ab12cd34.2@node1")
    ('123-ab12cd34', 123, 'node1')
    >>> parse_run("123-ab12cd34") is None, parse_run("x-1") is None
    (False, True)
    """
    rest, at, where = name.partition("@")
    pid, dash, token = rest.partition("-")
    token = token.split(".", 1)[0]
    if not (pid.isdigit() and dash and len(token) == 8 and all(c in "0123456789abcdef" for c in token)):
        return None
    return f"{pid}-{token}", int(pid), (where if at else None)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class LeaseInfo:
    """A lease's content (see the module's notes)."""

    run: str
    host: str
    pid: int
    started: float
    expires: float

    @classmethod
    def from_json(cls, raw: bytes | str) -> LeaseInfo | None:
        try:
            d = json.loads(raw)
            return cls(str(d["run"]), str(d["host"]), int(d["pid"]), float(d["started"]), float(d["expires"]))
        except (ValueError, KeyError, TypeError):
            return None


def is_dead(run: tuple[str, int, str | None], leases: Mapping[str, LeaseInfo], now: float | None = None) -> bool:
    """Whether the run ``run`` (from :func:`parse_run`) is gone: by its lease in ``leases`` (run
    id -> lease) when it has one, else by its pid when its host is this one."""
    rid, pid, where = run
    if rid == run_id():
        return False
    lease = leases.get(rid)
    if lease is not None:
        if lease.host == host():
            return not alive(lease.pid)
        return (time.time() if now is None else now) > lease.expires
    return where == host() and not alive(pid)


class Lease:
    """This run's lease on OUT, the object ``<folder>/<run id>@<host>.lease`` of ``store`` (a
    :class:`kbatch.tables._leftovers.Store`), written by :meth:`take`, renewed by a daemon thread,
    deleted by :meth:`release`."""

    def __init__(self, store: Any, folder: str, seconds: float = LEASE_SECONDS) -> None:
        self.store = store
        self.key = f"{folder.rstrip('/')}/{run_id()}@{host()}{LEASE_SUFFIX}"
        self.seconds = seconds
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        info = {"run": run_id(), "host": host(), "pid": os.getpid(), "started": self.started,
                "expires": time.time() + self.seconds}
        self.store.put(self.key, json.dumps(info).encode())

    def take(self) -> Lease:
        """Write the lease and start renewing it."""
        self._write()
        self._thread = threading.Thread(target=self._renew, name="kbatch-lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            with contextlib.suppress(Exception):  # a network hiccup: the next renewal tries again
                self._write()

    def release(self) -> None:
        """Stop renewing and delete the lease (its folder too when nothing else is left in it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.store.delete([self.key])

