"""`Registry`: schemas by id, GUID or subject version, from a ``_schemas`` topic, a REST API or files.

One cache per registry, shared by every copy of it in a process: a schema is fetched (and its
references resolved) at most once per process, whatever the threads, and a registry pickled to
a Spark executor carries what it has already fetched, so the executor asks again for nothing
the driver knew. Pickling carries settings and schemas, never a connection.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from kbatch.errors import LayoutError

from ._errors import RegistryError, SchemaNotFoundError
from ._files import load_directory
from ._records_arrow import records_to_arrow
from ._rest import RestClient, RestSource
from ._scan import ScanValues
from ._schema import Schema, join_subject, qualify_reference
from ._store import SchemaStore, VersionState
from ._topic import DEFAULT_TOPIC, find_schemas_log, replay_log

__all__ = ["Registry"]


class _Source(Protocol):
    notes: list[str]

    def by_id(self, schema_id: int, subject: str | None = None) -> Schema: ...
    def by_guid(self, guid: uuid.UUID) -> Schema: ...
    def version(self, subject: str, version: int, *, deleted: bool = False) -> Schema: ...
    def latest(self, subject: str) -> Schema: ...
    def subjects(self, *, deleted: bool = False) -> list[str]: ...
    def versions(self, subject: str, *, deleted: bool = False) -> list[int]: ...


class _Cache:
    """Resolved schemas by key, behind one lock (held while fetching: one fetch per key)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entries: dict[tuple[Any, ...], Schema] = {}


_SHARED: dict[tuple[Any, ...], _Cache] = {}
_SHARED_LOCK = threading.Lock()


def _shared_cache(identity: tuple[Any, ...]) -> _Cache:
    with _SHARED_LOCK:
        cache = _SHARED.get(identity)
        if cache is None:
            cache = _SHARED[identity] = _Cache()
        return cache


class Registry:
    """Schemas by id, GUID or subject version, wherever they are kept.

    Parameters
    ----------
    source : str or mapping
        A registry's URL (``http://`` or ``https://``; several as a list or comma-separated),
        or ``{id: schema}`` with each schema a text (Avro) or a :class:`Schema`.
    auth : (str, str), optional
        HTTP basic user and password (also taken from ``https://user:password@host``).
    token : str, optional
        A bearer token.
    cafile, certfile, keyfile : str, optional
        TLS: the CA bundle to verify the registry with; a client certificate and its key.
    verify : bool, default True
        False skips TLS verification (test setups only).
    timeout : float, default 10
        Seconds per request.
    retries : int, default 3
        Further attempts after a refused connection, a timeout, HTTP 408, 429 or 5xx.
    backoff : float, default 0.25
        Seconds before the first retry, doubled each time.
    headers : dict, optional
        Extra request headers.

    See Also
    --------
    Registry.from_log_dirs : the registry's own ``_schemas`` topic in a backup.
    Registry.from_directory : schema files.
    """

    def __init__(
        self,
        source: str | Sequence[str] | Mapping[int, str | Schema],
        *,
        auth: tuple[str, str] | None = None,
        token: str | None = None,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        verify: bool = True,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._source: _Source
        if isinstance(source, Mapping):
            store = SchemaStore()
            for key, value in source.items():
                if isinstance(key, bool) or not isinstance(key, int):
                    raise TypeError(f"schema ids must be integers, got {key!r}")
                if isinstance(value, str):
                    value = Schema(value, "AVRO", key)
                elif not isinstance(value, Schema):
                    raise TypeError(f"schema {key} must be a str or a Schema, got {type(value).__name__}")
                store.add(replace(value, id=key))
            self._source, self._where = store, f"{len(source)} schemas given"
            self._cache = _Cache()
        elif isinstance(source, (str, list, tuple)):
            client = RestClient(source, auth=auth, token=token, cafile=cafile, certfile=certfile, keyfile=keyfile,
                                verify=verify, timeout=timeout, retries=retries, backoff=backoff, headers=headers)
            self._source, self._where = RestSource(client), ", ".join(client.urls)
            self._cache = _shared_cache(client.identity())
        else:
            raise TypeError(f"a registry is a URL or {{id: schema}}, got {type(source).__name__}; "
                            f"see Registry.from_log_dirs and Registry.from_directory")

    @classmethod
    def _of_store(cls, store: SchemaStore, where: str) -> Registry:
        registry = cls.__new__(cls)
        registry._source, registry._where, registry._cache = store, where, _Cache()
        return registry

    @classmethod
    def from_log_dirs(
        cls, root: str | os.PathLike[str], *, recursive: bool = False,
        storage_options: dict[str, Any] | None = None, topic: str = DEFAULT_TOPIC,
    ) -> Registry:
        """The registry's state replayed from its own topic (``_schemas``, partition 0).

        Parameters
        ----------
        root : str or Path
            A ``log.dirs`` root, a backup of several (with ``recursive``), the partition
            directory itself, or a URL (``s3://...``).
        recursive : bool, default False
            Search ``root`` at any depth.
        storage_options : dict, optional
            Options of the URL's filesystem, as :func:`kbatch.open_log` takes them.
        topic : str, default "_schemas"
            The registry's ``kafkastore.topic``.

        Raises
        ------
        RegistryError
            No such topic under ``root`` (the message names the topics found).
        """
        log = find_schemas_log(root, topic=topic, recursive=recursive, storage_options=storage_options)
        try:
            store = replay_log(log)
        finally:
            log.close()
        return cls._of_store(store, f"{topic} at {os.fspath(root)}")

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Registry:
        """Schemas kept in files (see :mod:`kbatch.values` for the layout)."""
        return cls._of_store(load_directory(path), f"directory {os.fspath(path)}")

    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str], *, recursive: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> Registry:
        """A ``log.dirs`` root (or backup, or URL) holding ``_schemas`` (:meth:`from_log_dirs`), else
        a local directory of schema files (:meth:`from_directory`): what ``kbatch convert
        --registry PATH`` and the Spark source's ``schemaRegistry.path`` name.

        Raises
        ------
        RegistryError
            Neither.
        """
        try:
            return cls.from_log_dirs(path, recursive=recursive, storage_options=storage_options)
        except (RegistryError, LayoutError, FileNotFoundError):
            if not os.path.isdir(path):
                raise RegistryError("not a log.dirs root with a _schemas topic, nor a directory of schema files",
                                    url=os.fspath(path)) from None
        return cls.from_directory(path)

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        with self._cache.lock:
            entries = dict(self._cache.entries)
        return {"source": self._source, "where": self._where, "entries": entries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._source, self._where = state["source"], state["where"]
        if isinstance(self._source, RestSource):
            self._cache = _shared_cache(self._source.client.identity())
        else:
            self._cache = _Cache()
        with self._cache.lock:
            for key, schema in state["entries"].items():
                self._cache.entries.setdefault(key, schema)

    def __repr__(self) -> str:
        return f"<Registry {self._where}>"

    def records_to_arrow(self, table: Any, values: Registry | None = None, keys: Registry | None = None,
                       **options: Any) -> Any:
        """``table`` (a ``RecordTable``) as a ``pyarrow.Table`` with its values decoded by
        ``values`` and its keys by ``keys`` (registries; None: left as bytes):
        :func:`kbatch.values.records_to_arrow`. This is how ``RecordTable.to_arrow(values=...,
        keys=...)`` reaches the decoder: kbatch's record layers never import ``kbatch.values``,
        they call the registry they are given."""
        return records_to_arrow(table, values, keys, **options)

    def scan_values(self, topic: str, source: Any, values: Registry | None = None, keys: Registry | None = None,
                    *, errors: str = "raise", fields: Sequence[str] | None = None) -> ScanValues:
        """The typed values (decoded by ``values``) and keys (by ``keys``) of a lazy scan of
        ``topic`` whose raw columns are ``source`` (a ``pyarrow.Schema``): the reader schemas,
        the output schema, each batch's decode (:class:`kbatch.values._scan.ScanValues`). This is
        how ``LogDir.scan_records(values=...)`` and :func:`kbatch.log.scan_logs` reach the decoder."""
        return ScanValues(topic, source, values, keys, errors=errors, fields=fields)

    # ------------------------------------------------------------------ lookups

    @property
    def notes(self) -> list[str]:
        """What the replay of a ``_schemas`` topic skipped, and why."""
        return list(self._source.notes)

    @property
    def keytypes(self) -> dict[str, int]:
        """Records a ``_schemas`` replay read, by key type (empty for other registries)."""
        return dict(getattr(self._source, "keytypes", {}))

    @property
    def is_local(self) -> bool:
        """Whether every schema is in memory (a topic, files, a dict), not behind a URL."""
        return isinstance(self._source, SchemaStore)

    def _cached(self, key: tuple[Any, ...], fetch: Callable[[], Schema]) -> Schema:
        with self._cache.lock:
            schema = self._cache.entries.get(key)
            if schema is None:
                schema = self._cache.entries[key] = self._resolve(fetch())
            return schema

    def schema(self, schema_id: int, *, subject: str | None = None) -> Schema:
        """The schema with this id, its references resolved.

        Parameters
        ----------
        schema_id : int
            The id a frame carries.
        subject : str, optional
            Where to look: a subject (``orders-value``) or a context (``:.eu:``); ids are per
            context, and the default context is searched without one.

        Raises
        ------
        SchemaNotFoundError
            No schema has this id there.
        """
        if isinstance(schema_id, bool) or not isinstance(schema_id, int):
            raise TypeError(f"a schema id is an int, got {schema_id!r}")
        return self._cached(("id", subject or "", schema_id), lambda: self._source.by_id(schema_id, subject))

    def schemas(self, ids: Iterable[int], *, subject: str | None = None) -> dict[int, Schema]:
        """The schemas of several ids (e.g. ``numpy.unique`` of a frame's ``schema_id``; -1 skipped)."""
        return {int(i): self.schema(int(i), subject=subject) for i in ids if int(i) >= 0}

    def schema_by_guid(self, guid: uuid.UUID | str | bytes) -> Schema:
        """The schema with this GUID (a UUID, its text, or its 16 bytes), references resolved."""
        if isinstance(guid, bytes):
            guid = uuid.UUID(bytes=guid)
        elif isinstance(guid, str):
            guid = uuid.UUID(guid)
        key = guid
        return self._cached(("guid", key), lambda: self._source.by_guid(key))

    def version(self, subject: str, version: int | str, *, deleted: bool = False) -> Schema:
        """A subject's version (``"latest"`` or -1: the highest live one), references resolved.

        ``deleted=True`` also finds soft-deleted versions (their ids still decode old data).
        """
        number = -1 if version == "latest" else int(version)
        return self._cached(("version", subject, number, deleted),
                            lambda: self._source.version(subject, number, deleted=deleted))

    def latest(self, subject: str) -> Schema:
        """The subject's highest live version, references resolved (fetched once per registry)."""
        return self.version(subject, -1)

    def subjects(self, *, deleted: bool = False) -> list[str]:
        """Subjects with a live version (``deleted``: also soft-deleted ones), sorted."""
        return self._source.subjects(deleted=deleted)

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        """A subject's live versions (``deleted``: also soft-deleted ones), ascending."""
        return self._source.versions(subject, deleted=deleted)

    def listing(self) -> list[tuple[Schema, VersionState, int]]:
        """Every subject version a local registry holds, permanently deleted ones included:
        ``(schema, state, offset)`` with state ``"live"``, ``"soft"`` (soft-deleted) or
        ``"hard"`` (permanently deleted, its id still resolvable), and the offset of its last
        record in ``_schemas`` (-1 for files); then the schemas known by id only, state
        ``"id"``. What ``kbatch schemas`` prints."""
        if not isinstance(self._source, SchemaStore):
            raise TypeError("listing() is for local registries (a _schemas topic, files, a dict)")
        rows = self._source.listing()
        return rows + [(s, "id", -1) for s in self._source.unversioned()]

    # ------------------------------------------------------------------ references

    def _raw_version(self, subject: str, version: int) -> Schema:
        """A referenced subject version as stored (soft-deleted ones too), fetched once."""
        with self._cache.lock:
            key = ("reference", subject, version)
            schema = self._cache.entries.get(key)
            if schema is None:
                schema = self._cache.entries[key] = self._source.version(subject, version, deleted=True)
            return schema

    def _resolve(self, schema: Schema) -> Schema:
        """``schema`` with :attr:`Schema.dependencies`: every schema its references reach, each
        before those using it (Confluent's ``AbstractSchemaProvider.resolveReferences``: by
        name, first one wins; soft-deleted versions count, as a reader's lookup does)."""
        if not schema.references:
            return schema
        found: dict[str, Schema] = {}
        visited: set[str] = set()

        def walk(schema: Schema, parent: str) -> None:
            for ref in schema.references:
                subject = qualify_reference(ref.subject, parent)
                try:
                    dep = self._raw_version(subject, ref.version)
                except SchemaNotFoundError as exc:
                    raise SchemaNotFoundError(
                        f"reference {ref.name!r} of schema {schema.id if schema.id is not None else schema.subject}: "
                        f"{exc.reason}", url=exc.url, status=exc.status) from None
                if ref.name in visited:
                    continue
                visited.add(ref.name)
                if ref.name not in found:
                    walk(dep, dep.subject or subject)
                    found[ref.name] = dep

        walk(schema, schema.subject or join_subject(schema.context, ""))
        return replace(schema, dependencies=tuple(found.items()))
