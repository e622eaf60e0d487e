"""Where log bytes live: a local path (memory-mapped, as always) or any filesystem ``pyarrow.fs`` reaches.

A target is a plain path, ``file://...`` or a URL (``s3://``, ``gs://``, ``abfs://``,
``hdfs://``, ...), optionally with ``filesystem=`` (a ``pyarrow.fs.FileSystem``, or an fsspec
filesystem, wrapped as ``pyarrow.fs.PyFileSystem(FSSpecHandler(fs))``) and
``storage_options=`` (keyword arguments of the scheme's pyarrow filesystem, e.g.
``S3FileSystem(endpoint_override=..., region=...)``; without them credentials are found the
way pyarrow finds them: environment, config files, instance metadata).

Local targets never import pyarrow: :func:`locate` gives ``Location(fs=None, ...)`` and the
caller memory-maps the file. Remote files are read through :class:`RangeReader`:

- a listing is one call (``FileSelector(recursive=True)`` is one paginated
  ``ListObjectsV2`` walk on S3, not one call per directory);
- a read of ``[start, stop)`` is one ``read_at`` of at least :data:`CHUNK` bytes (fewer at the
  end of the object), kept as the reader's one window until a read outside it replaces it, so
  framing a chunk and decoding it cost one request; meanwhile the next :data:`READ_AHEAD`
  chunks are requested on the shared I/O pool (:func:`io_pool`), so that downloading overlaps
  decoding, and memory is the range plus a bounded number of chunks;
- a short read, a missing object or bucket, a permission error: :class:`kbatch.errors.StorageError`
  naming the object (``.url``), never a partial buffer presented as complete.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Final, NamedTuple

from kbatch.errors import StorageError

__all__ = [
    "CHUNK",
    "Entry",
    "Location",
    "RangeReader",
    "io_pool",
    "StoragePath",
    "is_remote",
    "join",
    "list_files",
    "locate",
    "parse_options",
    "prefetch",
    "read_small",
]

#: Concurrent requests :func:`prefetch` makes (the small objects of a listing).
PREFETCH_THREADS: Final = 16

#: Bytes of one range request of a remote read (at least; the last of an object is shorter).
CHUNK: Final = 64 << 20

#: Range requests each :class:`RangeReader` keeps in flight ahead of what it serves.
READ_AHEAD: Final = 2

#: Threads of the one background I/O pool (:func:`io_pool`) every reader's read-ahead shares.
IO_THREADS: Final = 8

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The process's background I/O pool (created on first use; again in a forked child,
    which inherits no threads: Spark's Python workers are forked)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="kbatch-io")
            _pool_pid = os.getpid()
        return _pool

_PYARROW_SCHEMES: Final = {
    "s3": "S3FileSystem",
    "s3a": "S3FileSystem",
    "gs": "GcsFileSystem",
    "gcs": "GcsFileSystem",
    "abfs": "AzureFileSystem",
    "abfss": "AzureFileSystem",
    "az": "AzureFileSystem",
    "hdfs": "HadoopFileSystem",
}


class Location(NamedTuple):
    """A file or directory: ``fs`` None means local (``path`` an OS path)."""

    fs: Any
    path: str
    url: str

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/")) if self.fs is not None else os.path.basename(self.path)


class Entry(NamedTuple):
    """One listed object: its path in the filesystem, size, whether it is a directory, and its
    bytes when :func:`prefetch` read them."""

    path: str
    size: int
    is_dir: bool
    data: bytes | None = None


class _Stat(NamedTuple):
    st_size: int


class StoragePath:
    """The few ``pathlib.Path`` methods file-at-a-time tools use (``kbatch dump``), for a remote file.

    ``str()`` is its URL.
    """

    def __init__(self, loc: Location) -> None:
        self.location = loc
        self.name = posixpath.basename(loc.path)
        self.suffix = posixpath.splitext(self.name)[1]

    def __str__(self) -> str:
        return self.location.url

    def with_suffix(self, suffix: str) -> StoragePath:
        loc = self.location
        return StoragePath(Location(loc.fs, posixpath.splitext(loc.path)[0] + suffix,
                                    posixpath.splitext(loc.url)[0] + suffix))

    def _info(self) -> Any:
        try:
            return self.location.fs.get_file_info(self.location.path)
        except Exception as exc:
            raise _error(exc, self.location.url, "cannot look up") from exc

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return bool(self._info().type == pafs.FileType.File)

    def stat(self) -> _Stat:
        return _Stat(int(self._info().size or 0))

    def read_bytes(self) -> bytes:
        raw = read_small(self.location)
        if raw is None:
            raise StorageError(f"cannot read {self.location.url}: no such object", url=self.location.url)
        return raw


def parse_options(items: Any) -> dict[str, Any]:
    """``KEY=VALUE`` strings (a CLI's ``--storage-option``) as ``storage_options``: ``true``/``false``
    and integers are converted.

    >>> parse_options(["endpoint_override=http://127.0.0.1:9000", "scheme=http", "connect_timeout=5"])
    {'endpoint_override': 'http://127.0.0.1:9000', 'scheme': 'http', 'connect_timeout': 5}
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a storage option is KEY=VALUE, got {item!r}")
        v: Any = value.strip()
        if v.lower() in ("true", "false"):
            v = v.lower() == "true"
        elif v.lstrip("-").isdigit():
            v = int(v)
        out[key.strip()] = v
    return out


def is_remote(target: Any, filesystem: Any = None) -> bool:
    """Whether ``target`` names something outside the local filesystem (or a filesystem is given)."""
    if filesystem is not None:
        return True
    if isinstance(target, Location):
        return target.fs is not None
    if isinstance(target, StoragePath):
        return True
    text = os.fspath(target) if isinstance(target, os.PathLike) else target
    return isinstance(text, str) and "://" in text and not text.startswith("file://")


def _wrap(filesystem: Any) -> Any:
    import pyarrow.fs as pafs

    if isinstance(filesystem, pafs.FileSystem):
        return filesystem
    # an fsspec filesystem (duck-typed: fsspec is not a dependency)
    if hasattr(filesystem, "cat_file") and hasattr(filesystem, "find"):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, got {type(filesystem)!r}")


def _url(fs: Any, path: str) -> str:
    scheme = getattr(fs, "type_name", "") or ""
    scheme = {"gcs": "gs", "abfs": "abfs", "py::fsspec+": ""}.get(scheme, scheme)
    return f"{scheme}://{path}" if scheme and scheme != "local" else path


def locate(target: Any, filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> Location:
    """Resolve a path or URL (and ``filesystem``/``storage_options``) to a :class:`Location`.

    >>> locate("/var/kafka-logs/t-0")
    Location(fs=None, path='/var/kafka-logs/t-0', url='/var/kafka-logs/t-0')
    >>> locate("file:///var/kafka-logs").path
    '/var/kafka-logs'
    """
    if isinstance(target, Location):
        return target
    if isinstance(target, StoragePath):
        return target.location
    text = os.fspath(target)
    if filesystem is None and not is_remote(text):
        if text.startswith("file://"):
            text = text[len("file://"):]
        if storage_options:
            raise ValueError("storage_options apply to a remote URL (s3://, gs://, ...), not to a local path")
        return Location(None, text, text)
    try:
        import pyarrow.fs as pafs
    except ImportError as exc:  # pragma: no cover - pyarrow is there in every test setup
        raise ImportError(f"reading {text} needs pyarrow (pip install 'kbatch[arrow]')") from exc
    if filesystem is not None:
        fs = _wrap(filesystem)
        path = text.split("://", 1)[1] if "://" in text else text
        return Location(fs, path.rstrip("/"), text.rstrip("/"))
    scheme, _, rest = text.partition("://")
    if storage_options:
        cls_name = _PYARROW_SCHEMES.get(scheme.lower())
        if cls_name is None:
            raise ValueError(f"storage_options given for {scheme}:// that pyarrow.fs has no filesystem for; "
                             "pass filesystem= instead")
        try:
            fs = getattr(pafs, cls_name)(**storage_options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"storage_options for {scheme}://: {exc}") from exc
        path = rest
    else:
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (OSError, ValueError) as exc:
            try:  # a scheme pyarrow does not know: fsspec's, when installed
                fsspec = importlib.import_module("fsspec")  # optional, not a dependency
                fs, path = _wrap(fsspec.filesystem(scheme)), rest
            except (ImportError, ValueError):
                raise StorageError(f"cannot open {text}: {exc}", url=text) from exc
    return Location(fs, path.rstrip("/"), text.rstrip("/"))


def join(loc: Location, *names: str) -> Location:
    """``loc`` / ``names`` (with its URL)."""
    if loc.fs is None:
        p = os.path.join(loc.path, *names)
        return Location(None, p, p)
    return Location(loc.fs, posixpath.join(loc.path, *names), posixpath.join(loc.url, *names))


def _error(exc: BaseException, url: str, what: str) -> StorageError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        reason = f"{what} {url}: no such object ({detail})"
    elif isinstance(exc, PermissionError) or "ACCESS_DENIED" in str(exc).upper() or "AccessDenied" in str(exc):
        reason = f"{what} {url}: permission denied ({detail})"
    else:
        reason = f"{what} {url}: {detail}"
    err = StorageError(reason, url=url)
    err.__cause__ = exc
    return err


def list_files(loc: Location, recursive: bool = False) -> list[Entry]:
    """Every file (and directory) under ``loc``: one listing call, recursive or not.

    Raises
    ------
    StorageError
        The directory, bucket or prefix cannot be listed (missing, permission denied).
    """
    import pyarrow.fs as pafs

    fs = loc.fs
    try:
        infos = fs.get_file_info(pafs.FileSelector(loc.path, recursive=recursive, allow_not_found=False))
    except Exception as exc:
        raise _error(exc, loc.url, "cannot list") from exc
    return [Entry(i.path, i.size or 0, i.type == pafs.FileType.Directory) for i in infos]


def _open(loc: Location, size: int | None) -> Any:
    """``open_input_file`` (pyarrow's Python API takes no size, so an S3 open is one metadata
    request, HEAD, before the reads; ``size`` is kept for when it does)."""
    del size
    return loc.fs.open_input_file(loc.path)


def read_small(loc: Location, size: int | None = None) -> bytes | None:
    """The whole of a small file (an index, a checkpoint), or None when absent (remote: a HEAD
    and one GET)."""
    if loc.fs is None:
        try:
            with open(loc.path, "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
    try:
        with _open(loc, size) as f:
            size = f.size()
            data = f.read_at(size, 0) if size else b""
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise _error(exc, loc.url, "cannot read") from exc
    if len(data) != size:
        raise StorageError(f"cannot read {loc.url}: short read ({len(data)} of {size} bytes)", url=loc.url)
    return bytes(data)


def prefetch(fs: Any, base_url: tuple[str, str], entries: list[Entry], wanted: Any) -> list[Entry]:
    """``entries`` with the bytes of those ``wanted(entry)`` selects read, concurrently (one
    request each, :data:`PREFETCH_THREADS` at a time: opening a bucket of many partitions costs
    its index objects' latency once per thread, not once per object).

    ``base_url``: (filesystem path, URL) of the listed root, to name objects in errors. An
    object gone since the listing is left without data (its reader then says so).
    """
    picked = [k for k, e in enumerate(entries) if not e.is_dir and wanted(e)]
    if not picked:
        return entries
    root, url = base_url

    def one(k: int) -> bytes | None:
        p = entries[k].path
        return read_small(Location(fs, p, url + p[len(root):] if p.startswith(root) else p), entries[k].size)

    out = list(entries)
    with ThreadPoolExecutor(min(PREFETCH_THREADS, len(picked))) as pool:
        for k, data in zip(picked, pool.map(one, picked), strict=True):
            if data is not None:
                out[k] = out[k]._replace(data=data)
    return out


class RangeReader:
    """Byte ranges of one remote object: one window served to the reader, and up to ``ahead``
    range requests of ``chunk`` bytes in flight after it on the shared I/O pool (read-ahead).

    The window is what :meth:`view` returns; when a view needs bytes past it, the read-ahead
    chunk that starts there becomes (part of) the next window and the next chunk is requested,
    so downloading overlaps decoding. Memory: the window, at most ``ahead`` chunks in flight,
    and (with :meth:`then`) the first chunk of the object read next.

    Attributes
    ----------
    size : int
        The object's size (from the listing, or one metadata request).
    limit : int
        No window or read-ahead reaches past this byte unless a view asks for it (default:
        ``size``; :meth:`bound` sets it): a reader told which bytes are wanted fetches no
        others.
    requests, bytes_read : int
        Range requests made and bytes they returned (for the bench's requests per GiB).
    """

    def __init__(self, loc: Location, size: int | None = None, chunk: int = CHUNK, ahead: int = READ_AHEAD) -> None:
        self.loc = loc
        self.chunk = chunk
        self.ahead = ahead
        #: every file opened, and those no fetch is using
        self._files: list[Any] = []
        self._idle: list[Any] = []
        self._known_size = size
        self._lock = threading.Lock()
        self._win: memoryview = memoryview(b"")
        self._win_start = 0
        #: (start, length, future) of consecutive read-ahead chunks, oldest first
        self._pending: deque[tuple[int, int, Future[memoryview]]] = deque()
        self._next: RangeReader | None = None
        self.requests = 0
        self.bytes_read = 0
        if size is None:
            size = self._open().size()
        self.size = int(size)
        self.limit = self.size

    def bound(self, stop: int | None) -> None:
        """Fetch nothing at or past ``stop`` (None: the end) that a view does not ask for: windows
        end there, read-ahead stops there, and the first chunk :meth:`then` would request of the
        next object is not requested (a reader that knows which ranges it wants: a time index)."""
        self.limit = self.size if stop is None else max(0, min(int(stop), self.size))

    def _extent(self, start: int, stop: int) -> int:
        """Where a window from ``start`` that must hold ``[start, stop)`` ends: a chunk at least,
        never past :attr:`limit` unless ``stop`` is, never past the object."""
        return min(self.size, max(stop, min(start + self.chunk, max(self.limit, start))))

    def _open(self) -> Any:
        """An opened file (the first; one metadata request): what the size is asked of."""
        with self._lock:  # the reader's thread and the pool's may open it first
            if not self._files:
                self._idle.append(self._new_file())
            return self._files[0]

    def _new_file(self) -> Any:
        try:
            f = _open(self.loc, self._known_size)
        except Exception as exc:
            raise _error(exc, self.loc.url, "cannot open") from exc
        self._files.append(f)
        return f

    def _take_file(self) -> Any:
        """An opened file no other fetch is using: a fetch seeks its own, so that fetches run
        concurrently (another is opened, one metadata request, only when they overlap)."""
        with self._lock:
            return self._idle.pop() if self._idle else self._new_file()

    def read(self, start: int, n: int) -> bytes:
        """Exactly ``min(n, size - start)`` bytes at ``start`` (one request, no window)."""
        n = max(0, min(n, self.size - start))
        if n == 0:
            return b""
        if self._win_start <= start and start + n <= self._win_start + len(self._win):
            a = start - self._win_start
            return bytes(self._win[a : a + n])
        return bytes(self._fetch(start, n))

    def _fetch(self, start: int, n: int) -> memoryview:
        """One range request (in the reader's thread or the pool's): exactly ``n`` bytes or a
        StorageError naming the object."""
        f = self._take_file()
        try:
            # seek + read_buffer: the bytes land in one Arrow buffer, not copied again into a
            # Python bytes object as read_at's are (half the reader's CPU per byte on S3)
            f.seek(start)
            data = f.read_buffer(n)
        except Exception as exc:
            raise _error(exc, self.loc.url, f"cannot read bytes {start}..{start + n} of") from exc
        finally:
            with self._lock:
                self._idle.append(f)
        with self._lock:
            self.requests += 1
            self.bytes_read += len(data)
        if len(data) != n:
            raise StorageError(
                f"cannot read {self.loc.url}: short read at byte {start} ({len(data)} of {n} bytes; "
                f"the object changed or was cut since it was listed at {self.size} bytes)",
                position=start + len(data), url=self.loc.url,
            )
        return memoryview(data)

    def _take(self, start: int, stop: int) -> memoryview:
        """``[start, stop)`` or more: the read-ahead chunks from ``start`` on (waited for; a
        failed one raises its error here), and whatever they miss fetched now."""
        if self._pending and self._pending[0][0] != start:
            self._cancel()  # read-ahead for another position: not what is read
        pieces: list[memoryview] = []
        pos = start
        while self._pending and pos < stop:
            a, n, fut = self._pending.popleft()
            pieces.append(fut.result())
            pos = a + n
        if pos < stop:
            pieces.append(self._fetch(pos, stop - pos))
        if len(pieces) == 1:
            return pieces[0]
        joined = bytearray(sum(len(p) for p in pieces))
        at = 0
        for p in pieces:
            joined[at : at + len(p)] = p
            at += len(p)
        return memoryview(joined)

    def _read_ahead(self) -> None:
        """Keep ``ahead`` chunks requested after the window; once the object is wholly
        requested, the rest of that budget goes to the objects :meth:`then` chains after it
        (the first chunk of each, up to one larger than a chunk: its own read-ahead goes on)."""
        nxt = self._pending[-1][0] + self._pending[-1][1] if self._pending else self._win_start + len(self._win)
        pool = io_pool() if self.ahead > 0 else None
        end = min(self.size, self.limit)
        while pool is not None and len(self._pending) < self.ahead and nxt < end:
            n = min(self.chunk, end - nxt)
            self._pending.append((nxt, n, pool.submit(self._fetch, nxt, n)))
            nxt += n
        budget = self.ahead - len(self._pending)
        other = self._next if nxt >= self.size else None
        while other is not None and budget > 0:
            other.start()
            budget -= 1
            other = other._next if other.size <= other.chunk else None

    def then(self, other: RangeReader) -> None:
        """Read ``other`` after this object: its first chunk is requested as soon as this
        object's last one is and the read-ahead has room (read-ahead across the consecutive
        segments of a log, and from a log to the next)."""
        self._next = other

    def start(self) -> None:
        """Request the first chunk now, unless it is requested or reading has begun (a view
        from byte 0 takes it)."""
        if self.ahead > 0 and self.limit and not self._pending and not len(self._win):
            n = min(self.chunk, self.limit)
            self._pending.append((0, n, io_pool().submit(self._fetch, 0, n)))

    def view(self, start: int, stop: int) -> tuple[memoryview, int]:
        """(buffer, its offset in the object) covering ``[start, stop)`` (clipped to the object).

        Served from the window when it covers the range; otherwise the window is replaced by
        ``[start, max(stop, start + chunk))`` (the read-ahead chunk that starts at ``start``,
        else one request), or, when ``start`` is in the window, by its tail and the chunk(s)
        that follow it (no byte fetched twice). Then the read-ahead is topped up.
        """
        stop = min(stop, self.size)
        if start >= stop:
            return memoryview(b""), start
        ws = self._win_start
        if ws <= start and stop <= ws + len(self._win):
            return self._win, ws
        we = ws + len(self._win)
        if ws <= start < we:
            # the range begins in the window: keep its tail, take only what follows it
            tail = self._win[start - ws :]
            more = self._take(we, self._extent(we, stop))
            joined = bytearray(len(tail) + len(more))
            joined[: len(tail)] = tail
            joined[len(tail) :] = more
            self._win = memoryview(joined)
        else:
            self._win = memoryview(b"")  # let the old window go before the new one arrives
            self._win = self._take(start, self._extent(start, stop))
        self._win_start = start
        self._read_ahead()
        return self._win, start

    def _cancel(self) -> None:
        """Forget the read-ahead: chunks not started are cancelled, running ones waited for
        (their file stays open until they end; their errors are not the reader's: unread)."""
        pending, self._pending = self._pending, deque()
        for _, _, fut in pending:
            if not fut.cancel():
                wait([fut])

    def drop(self) -> None:
        """Forget the window and the read-ahead (memory goes once no table points into it)."""
        self._cancel()
        self._win = memoryview(b"")
        self._win_start = 0

    def close(self) -> None:
        self.drop()
        self._next = None
        with self._lock:
            files, self._files, self._idle = self._files, [], []
        for f in files:
            f.close()
