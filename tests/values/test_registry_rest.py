"""Registry(url): the REST API of a small registry served on 127.0.0.1 by the test."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.registry_server import RegistryServer

import kbatch
from kbatch.values import Registry, RegistryError, SchemaNotFoundError

AVRO = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
MONEY = json.dumps({"type": "record", "name": "Money", "namespace": "shop", "fields": [
    {"name": "cents", "type": "long"}]})
PAYMENT = json.dumps({"type": "record", "name": "Payment", "namespace": "shop", "fields": [
    {"name": "amount", "type": "shop.Money"}]})


@pytest.fixture
def server():
    with RegistryServer() as s:
        yield s


def test_lookups_by_id_subject_and_version(server):
    server.state.register("orders-value", AVRO, schema_id=11)
    server.state.register("orders-value", '"string"', schema_id=12)
    server.state.register("proto", "syntax = 'proto3';", schema_type="PROTOBUF", schema_id=13)
    reg = Registry(server.url, backoff=0)
    assert reg.schema(11).text == AVRO and reg.schema(11).id == 11
    assert reg.schema(13).schema_type == "PROTOBUF"
    assert reg.subjects() == ["orders-value", "proto"]
    assert reg.versions("orders-value") == [1, 2]
    latest = reg.latest("orders-value")
    assert (latest.id, latest.version, latest.subject) == (12, 2, "orders-value")
    assert reg.version("orders-value", 1).id == 11


def test_each_id_is_fetched_once_per_process(server):
    server.state.register("orders-value", AVRO, schema_id=5)
    reg = Registry(server.url, backoff=0)
    barrier = threading.Barrier(4)

    def ask():
        barrier.wait()
        for _ in range(10):
            assert reg.schema(5).text == AVRO

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.state.requests["/schemas/ids/5"] == 1
    # another Registry of the same URL and identity in this process shares the cache
    assert Registry(server.url).schema(5).text == AVRO
    assert server.state.requests["/schemas/ids/5"] == 1


def test_a_pickled_registry_carries_its_schemas_not_its_connections(server):
    server.state.register("orders-value", AVRO, schema_id=6)
    reg = Registry(server.url, token="t0k", backoff=0)
    server.state.token = "t0k"
    assert reg.schema(6).text == AVRO
    payload = pickle.dumps(reg)
    assert b"t0k" in payload  # the settings travel (an executor may need to fetch more) ...
    server.state.fail_first = 100  # ... but what was fetched is not fetched again, in another process
    script = ("import pickle, sys; r = pickle.loads(sys.stdin.buffer.read()); "
              f"print(r.schema(6).id, r.schema(6).text == {AVRO!r})")
    done = subprocess.run([sys.executable, "-c", script], input=payload, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(kbatch.__file__).parents[1])})
    assert done.stdout.split() == [b"6", b"True"], done.stderr
    assert server.state.requests["/schemas/ids/6"] == 1
    with pytest.raises(RegistryError):  # and asks for anything new where it lands
        pickle.loads(payload).schema(7)


def test_basic_auth(server):
    server.state.register("s", AVRO, schema_id=1)
    server.state.basic = ("alice", "s3cret")
    with pytest.raises(RegistryError, match="Unauthorized") as info:
        Registry(server.url, backoff=0).schema(1)
    assert info.value.status == 401 and "/schemas/ids/1" in info.value.url
    assert Registry(server.url, auth=("alice", "s3cret")).schema(1).text == AVRO
    url = server.url.replace("http://", "http://alice:s3cret@")  # as Confluent's clients take it
    assert Registry(url).version("s", 1).id == 1


def test_bearer_token(server):
    server.state.register("s", AVRO, schema_id=1)
    server.state.token = "abc.def"
    with pytest.raises(RegistryError) as info:
        Registry(server.url, token="wrong").schema(1)
    assert info.value.status == 401
    assert Registry(server.url, token="abc.def").schema(1).text == AVRO


def test_a_server_error_is_retried_within_the_bound(server):
    server.state.register("s", AVRO, schema_id=1)
    server.state.fail_first = 2
    assert Registry(server.url, retries=2, backoff=0).schema(1).text == AVRO
    assert server.state.requests["/schemas/ids/1"] == 3


def test_retries_run_out_with_the_url_and_status(server):
    server.state.register("s", AVRO, schema_id=1)
    server.state.fail_first = 10
    with pytest.raises(RegistryError, match="after 3 attempts: Error in the backend") as info:
        Registry(server.url, retries=2, backoff=0).schema(1)
    assert info.value.status == 500 and info.value.url == f"{server.url}/schemas/ids/1"
    assert server.state.requests["/schemas/ids/1"] == 3


def test_a_refused_connection_is_retried_then_reported():
    with RegistryServer() as gone:
        url = gone.url
    with pytest.raises(RegistryError, match="after 2 attempts") as info:
        Registry(url, retries=1, backoff=0, timeout=2).schema(1)
    assert info.value.status == -1 and url in info.value.url


def test_several_urls_fail_over(server):
    server.state.register("s", AVRO, schema_id=1)
    with RegistryServer() as gone:
        dead = gone.url
    assert Registry(f"{dead},{server.url}", retries=0).schema(1).text == AVRO


def test_not_found_is_a_clear_error_and_not_retried(server):
    reg = Registry(server.url, retries=3, backoff=0)
    with pytest.raises(SchemaNotFoundError, match="no schema with id 42: Schema not found") as info:
        reg.schema(42)
    assert info.value.status == 404
    assert server.state.requests["/schemas/ids/42"] == 1
    with pytest.raises(SchemaNotFoundError, match="subject 'nope' has no version latest"):
        reg.latest("nope")


def test_references_are_resolved_over_rest(server):
    server.state.register("money", MONEY, schema_id=1)
    server.state.register("payment", PAYMENT, schema_id=2,
                          references=[{"name": "shop.Money", "subject": "money", "version": 1}])
    reg = Registry(server.url, backoff=0)
    payment = reg.schema(2)
    assert [(n, d.text, d.id) for n, d in payment.dependencies] == [("shop.Money", MONEY, 1)]
    assert server.state.requests["/subjects/money/versions/1"] == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="http"):
        Registry("ftp://x")
    with pytest.raises(ValueError, match="not both"):
        Registry("http://x", auth=("a", "b"), token="t")
    with pytest.raises(TypeError, match="from_log_dirs"):
        Registry(3.5)  # type: ignore[arg-type]


def test_tls_with_a_ca_file(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    with RegistryServer(certfile=str(cert), keyfile=str(key)) as server:
        server.state.register("s", AVRO, schema_id=1)
        assert server.url.startswith("https://")
        with pytest.raises(RegistryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            Registry(server.url, retries=0).schema(1)  # not trusted without the CA file
        assert Registry(server.url, cafile=str(cert)).schema(1).text == AVRO
        assert Registry(server.url, verify=False).version("s", 1).id == 1
