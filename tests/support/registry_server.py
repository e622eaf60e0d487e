"""A small schema registry REST API on 127.0.0.1, served from a thread, for tests.

It answers what :class:`kbatch.values.Registry` asks (``/schemas/ids/{id}``, ``/schemas/guids/{g}``,
``/subjects``, ``/subjects/{s}/versions[/{v|latest}]``) and what confluent-kafka's
``SchemaRegistryClient`` needs to register a schema (``POST /subjects/{s}/versions``), with
Confluent's error bodies. Tests script it: required basic credentials or bearer token, a number
of 500 answers to give first, and it counts the requests per path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import threading
import urllib.parse
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from typing_extensions import Self


class FakeRegistry:
    """State and script of the server (subjects -> versions -> schema dicts)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[int, dict] = {}
        self.subjects: dict[str, dict[int, dict]] = {}
        self.basic: tuple[str, str] | None = None
        self.token: str | None = None
        self.fail_first = 0  # answer this many requests with HTTP 500 first
        self.requests: Counter[str] = Counter()
        self.next_id = 1

    def register(self, subject: str, text: str, *, schema_type: str | None = None, references=None,
                 schema_id: int | None = None, deleted: bool = False) -> int:
        with self.lock:
            for sid, entry in self.by_id.items():
                if entry["schema"] == text and schema_id in (None, sid):
                    schema_id = sid
                    break
            if schema_id is None:
                schema_id = self.next_id
            self.next_id = max(self.next_id, schema_id + 1)
            entry = {"schema": text}
            if schema_type and schema_type != "AVRO":
                entry["schemaType"] = schema_type
            if references:
                entry["references"] = references
            self.by_id.setdefault(schema_id, entry)
            versions = self.subjects.setdefault(subject, {})
            for e in versions.values():
                if e["id"] == schema_id:
                    return schema_id
            version = max(versions, default=0) + 1
            versions[version] = {"subject": subject, "version": version, "id": schema_id, **entry,
                                 "deleted": deleted}
            return schema_id

    @staticmethod
    def guid(entry: dict) -> str:
        return str(uuid.UUID(bytes=hashlib.md5(entry["schema"].encode()).digest()))


def _handler(state: FakeRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _answer(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, code: int, message: str) -> None:
            self._answer(status, {"error_code": code, "message": message})

        def _authorised(self) -> bool:
            got = self.headers.get("Authorization")
            if state.basic is not None:
                want = "Basic " + base64.b64encode(":".join(state.basic).encode()).decode()
                return got == want
            if state.token is not None:
                return got == f"Bearer {state.token}"
            return True

        def _start(self) -> tuple[list[str], dict[str, list[str]]] | None:
            url = urllib.parse.urlsplit(self.path)
            with state.lock:
                state.requests[url.path] += 1
                failing = state.fail_first > 0
                state.fail_first -= failing
            if failing:
                self._error(500, 50001, "Error in the backend data store")
                return None
            if not self._authorised():
                self._error(401, 40101, "Unauthorized")
                return None
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            return parts, urllib.parse.parse_qs(url.query)

        def do_GET(self) -> None:
            started = self._start()
            if started is None:
                return
            parts, query = started
            deleted = query.get("deleted") == ["true"]
            if parts[:2] == ["schemas", "ids"] and len(parts) == 3:
                entry = state.by_id.get(int(parts[2]))
                if entry is None:
                    return self._error(404, 40403, "Schema not found")
                return self._answer(200, entry)
            if parts[:2] == ["schemas", "guids"] and len(parts) == 3:
                for entry in state.by_id.values():
                    if FakeRegistry.guid(entry) == parts[2]:
                        return self._answer(200, entry)
                return self._error(404, 40403, "Schema not found")
            if parts == ["subjects"]:
                return self._answer(200, sorted(s for s, vs in state.subjects.items()
                                                if deleted or any(not e["deleted"] for e in vs.values())))
            if parts[0] == "subjects" and len(parts) >= 3 and parts[2] == "versions":
                versions = state.subjects.get(parts[1])
                if versions is None:
                    return self._error(404, 40401, f"Subject '{parts[1]}' not found.")
                live = {v: e for v, e in versions.items() if deleted or not e["deleted"]}
                if len(parts) == 3:
                    return self._answer(200, sorted(live))
                which = parts[3]
                number = max((v for v, e in versions.items() if not e["deleted"]), default=None) \
                    if which == "latest" else int(which)
                entry = live.get(number) if number is not None else None
                if entry is None:
                    return self._error(404, 40402, f"Version {which} not found.")
                return self._answer(200, {k: v for k, v in entry.items() if k != "deleted"})
            return self._error(404, 404, "HTTP 404 Not Found")

        def do_POST(self) -> None:
            started = self._start()
            if started is None:
                return
            parts, _ = started
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if parts[0] == "subjects" and len(parts) == 3 and parts[2] == "versions":
                sid = state.register(parts[1], body["schema"], schema_type=body.get("schemaType"),
                                     references=body.get("references"))
                return self._answer(200, {"id": sid, "guid": FakeRegistry.guid(state.by_id[sid])})
            if parts[0] == "subjects" and len(parts) == 2:  # lookup: is this schema registered here
                for entry in state.subjects.get(parts[1], {}).values():
                    if entry["schema"] == body["schema"]:
                        return self._answer(200, {k: v for k, v in entry.items() if k != "deleted"})
                return self._error(404, 40403, "Schema not found")
            return self._error(404, 404, "HTTP 404 Not Found")

    return Handler


class RegistryServer:
    """``with RegistryServer() as server:`` a fake registry at ``server.url`` until the block ends."""

    def __init__(self, *, certfile: str | None = None, keyfile: str | None = None) -> None:
        self.state = FakeRegistry()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        scheme = "http"
        if certfile is not None:  # HTTPS with this certificate
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile, keyfile)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
