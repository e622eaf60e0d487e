"""A schema registry's REST API, read with the standard library (no new dependency).

The calls used, as Confluent's ``RestService`` makes them (Karapace, Redpanda and Apicurio's
Confluent mode answer the same)::

    GET /schemas/ids/{id}[?subject=S]          {"schema", "schemaType"?, "references"?}
                                               (S picks the context: ":.ctx:" or ":.ctx:name")
    GET /schemas/guids/{guid}                  the same, by GUID
    GET /subjects[?deleted=true]               ["orders-value", ...]
    GET /subjects/{S}/versions[?deleted=true]  [1, 2, 3]
    GET /subjects/{S}/versions/{V|latest}[?deleted=true]
                                               {"subject", "version", "id", "schema", ...}
    errors: HTTP 4xx/5xx with {"error_code": 40403, "message": "Schema not found"}

Authentication is HTTP basic (``auth=(user, password)``, or ``user:password@`` in the URL, as
Confluent's clients take it) or a bearer token; TLS uses a CA file, a client certificate and key,
or no verification. A refused connection, a timeout, HTTP 429 and 5xx are retried a bounded
number of times with exponential backoff; a 404 is :class:`SchemaNotFoundError` at once; any
other answer is :class:`RegistryError` with the URL and status. Several URLs (a list, or
comma-separated) are tried in turn. No connection outlives a call, so a client pickles as its
settings.
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any

from ._errors import RegistryError, SchemaNotFoundError
from ._schema import Schema, SchemaReference, schema_type_name, split_subject

__all__ = ["RestClient", "RestSource"]

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
_RETRIED = frozenset({408, 429, 500, 502, 503, 504})


class RestClient:
    """GET requests to a schema registry, with authentication, TLS and bounded retries.

    Parameters
    ----------
    urls : str or sequence of str
        The registry's base URL(s), ``http://`` or ``https://``; comma-separated in one string
        works too.
    auth : (str, str), optional
        HTTP basic user and password.
    token : str, optional
        A bearer token (``Authorization: Bearer ...``).
    cafile, certfile, keyfile : str, optional
        TLS: the CA bundle to verify the registry with; a client certificate and its key.
    verify : bool, default True
        False skips certificate and host name verification (test setups only).
    timeout : float, default 10
        Seconds for one request.
    retries : int, default 3
        Further attempts after a refused connection, a timeout, HTTP 408, 429 or 5xx.
    backoff : float, default 0.25
        Seconds before the first retry, doubled each time (at most 8).
    headers : dict, optional
        Extra request headers (e.g. Confluent Cloud's ``target-sr-cluster``).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
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
        parts = [u.strip() for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not parts:
            raise ValueError("a registry URL is needed")
        self.urls: list[str] = []
        for url in parts:
            split = urllib.parse.urlsplit(url)
            if split.scheme not in ("http", "https") or not split.hostname:
                raise ValueError(f"registry URL must be http:// or https://, got {url!r}")
            if split.username is not None and auth is None:  # user:password@host, as Confluent's clients
                auth = (urllib.parse.unquote(split.username), urllib.parse.unquote(split.password or ""))
            host = split.hostname if ":" not in split.hostname else f"[{split.hostname}]"
            netloc = host + (f":{split.port}" if split.port else "")
            self.urls.append(urllib.parse.urlunsplit((split.scheme, netloc, split.path.rstrip("/"), "", "")))
        if auth is not None and token is not None:
            raise ValueError("give auth (basic) or token (bearer), not both")
        if int(retries) < 0 or float(timeout) <= 0 or float(backoff) < 0:
            raise ValueError("retries and backoff must be >= 0 and timeout > 0")
        self.auth = auth
        self.token = token
        self.cafile, self.certfile, self.keyfile, self.verify = cafile, certfile, keyfile, bool(verify)
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.headers = dict(headers or {})
        self._ssl: ssl.SSLContext | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ssl"] = None  # rebuilt on first use where it lands
        return state

    def identity(self) -> tuple[Any, ...]:
        """What makes two clients see the same schemas: the URLs and who asks."""
        who = self.auth[0] if self.auth else ""
        if self.token is not None:
            who = "token " + hashlib.sha256(self.token.encode()).hexdigest()[:16]
        return (tuple(self.urls), who)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            context = ssl.create_default_context(cafile=self.cafile)
            if not self.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.certfile:
                context.load_cert_chain(self.certfile, self.keyfile)
            self._ssl = context
        return self._ssl

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        """The JSON answer to ``GET <url><path>?<query>``, retried as the class says.

        Raises
        ------
        SchemaNotFoundError
            HTTP 404.
        RegistryError
            Any other failure, after the retries when it is one that is retried.
        """
        suffix = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": _ACCEPT, **self.headers}
        if self.auth is not None:
            raw = f"{self.auth[0]}:{self.auth[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
        elif self.token is not None:
            headers["Authorization"] = "Bearer " + self.token
        last: RegistryError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), 8.0))
            for base in self.urls:
                url = base + suffix
                try:
                    return self._get_once(url, headers)
                except _Retry as exc:
                    tries = f"{attempt + 1} attempt" + ("s" if attempt else "")
                    last = RegistryError(f"schema registry request failed after {tries}: {exc.reason}", url=url,
                                         status=exc.status)
        assert last is not None
        raise last

    def _get_once(self, url: str, headers: dict[str, str]) -> Any:
        request = urllib.request.Request(url, headers=headers, method="GET")
        context = self._context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            detail = _message(exc.read())
            if exc.code in _RETRIED:
                raise _Retry(detail or str(exc.reason), exc.code) from None
            if exc.code == 404:
                raise SchemaNotFoundError(detail or "not found", url=url, status=404) from None
            raise RegistryError(f"schema registry refused the request: {detail or exc.reason}", url=url,
                                status=exc.code) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Retry(str(reason), -1) from None
        try:
            return json.loads(body)
        except ValueError:
            raise RegistryError("schema registry answered with something that is not JSON", url=url) from None


class _Retry(Exception):
    """A failure worth another attempt."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _message(body: bytes) -> str:
    """The registry's error message (``{"error_code", "message"}``), or the start of the body."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip()
    if isinstance(obj, dict) and "message" in obj:
        code = obj.get("error_code")
        return f"{obj['message']}" + (f" (error code {code})" if code is not None else "")
    return str(obj)[:200]


class RestSource:
    """A registry's schemas over its REST API, with :class:`kbatch.values._store.SchemaStore`'s
    lookup methods (each one request; the caching is the registry's)."""

    def __init__(self, client: RestClient) -> None:
        self.client = client
        self.notes: list[str] = []

    def describe(self) -> str:
        """Where the schemas come from, for messages."""
        return ", ".join(self.client.urls)

    def by_id(self, schema_id: int, subject: str | None = None) -> Schema:
        query = {"subject": subject} if subject else None
        try:
            answer = self.client.get(f"/schemas/ids/{int(schema_id)}", query)
        except SchemaNotFoundError as exc:
            raise SchemaNotFoundError(f"no schema with id {schema_id}: {exc.reason}", url=exc.url,
                                      status=exc.status) from None
        return _schema(answer, self.client.urls[0], schema_id=schema_id, context=split_subject(subject)[0])

    def by_guid(self, guid: uuid.UUID) -> Schema:
        try:
            answer = self.client.get(f"/schemas/guids/{guid}")
        except SchemaNotFoundError as exc:
            raise SchemaNotFoundError(f"no schema with GUID {guid}: {exc.reason}", url=exc.url,
                                      status=exc.status) from None
        schema = _schema(answer, self.client.urls[0])
        return Schema(schema.text, schema.schema_type, schema.id, schema.subject, schema.version,
                      schema.references, (), schema.deleted, schema.context, guid)

    def version(self, subject: str, version: int, *, deleted: bool = False) -> Schema:
        which = "latest" if version == -1 else str(int(version))
        try:
            answer = self.client.get(f"/subjects/{_quote(subject)}/versions/{which}",
                                     {"deleted": "true"} if deleted and version != -1 else None)
        except SchemaNotFoundError as exc:
            raise SchemaNotFoundError(f"subject {subject!r} has no version {which}: {exc.reason}", url=exc.url,
                                      status=exc.status) from None
        return _schema(answer, self.client.urls[0], context=split_subject(subject)[0])

    def latest(self, subject: str) -> Schema:
        return self.version(subject, -1)

    def subjects(self, *, deleted: bool = False) -> list[str]:
        answer = self.client.get("/subjects", {"deleted": "true"} if deleted else None)
        if not isinstance(answer, list) or not all(isinstance(s, str) for s in answer):
            raise RegistryError("GET /subjects did not answer a list of names", url=self.client.urls[0])
        return sorted(answer)

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        try:
            answer = self.client.get(f"/subjects/{_quote(subject)}/versions", {"deleted": "true"} if deleted else None)
        except SchemaNotFoundError:
            return []
        if not isinstance(answer, list) or not all(isinstance(v, int) for v in answer):
            raise RegistryError(f"GET /subjects/{subject}/versions did not answer a list of numbers",
                                url=self.client.urls[0])
        return sorted(answer)


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _schema(answer: Any, url: str, *, schema_id: int | None = None, context: str = ".") -> Schema:
    """A schema from a registry's answer."""
    try:
        if not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
            raise ValueError("no 'schema' string in it")
        refs = tuple(SchemaReference.from_json(r) for r in answer.get("references") or ())
        subject = answer.get("subject")
        answered_id = answer.get("id", schema_id)
        return Schema(answer["schema"], schema_type_name(answer.get("schemaType")),
                      answered_id if isinstance(answered_id, int) else schema_id,
                      subject if isinstance(subject, str) else None,
                      answer.get("version") if isinstance(answer.get("version"), int) else None,
                      refs, (), bool(answer.get("deleted", False)),
                      split_subject(subject)[0] if isinstance(subject, str) else context)
    except ValueError as exc:
        raise RegistryError(f"schema registry answered with an unusable schema: {exc}", url=url) from None
