"""A table on an object store (``OUT`` as ``s3://bucket/prefix``): the storage options each library
takes, and the one conditional write a Parquet folder's ledger commits with.

``--storage-option KEY=VALUE`` are the keyword arguments of pyarrow's filesystem
(``pyarrow.fs.S3FileSystem``: they open ROOT and OUT alike). The table libraries name the same
settings otherwise; :func:`iceberg_properties` and :func:`delta_options` translate them:

=====================  ==========================  =====================================
pyarrow (S3)           pyiceberg FileIO            deltalake ``storage_options``
=====================  ==========================  =====================================
endpoint_override      s3.endpoint                 AWS_ENDPOINT_URL
scheme=http            (in the endpoint)           AWS_ALLOW_HTTP=true
access_key             s3.access-key-id            AWS_ACCESS_KEY_ID
secret_key             s3.secret-access-key        AWS_SECRET_ACCESS_KEY
session_token          s3.session-token            AWS_SESSION_TOKEN
region                 s3.region                   AWS_REGION
anonymous              s3.anonymous                AWS_SKIP_SIGNATURE
force_virtual_addr..   s3.force-virtual-addressing AWS_VIRTUAL_HOSTED_STYLE_REQUEST
connect_timeout        s3.connect-timeout          AWS_CONNECT_TIMEOUT (seconds)
request_timeout        s3.request-timeout          AWS_TIMEOUT (seconds)
=====================  ==========================  =====================================

Options that only shape pyarrow's own behaviour (``background_writes``, ``allow_bucket_creation``,
...) are left out; any other is an error naming it, rather than a setting silently lost.
Without options each library finds credentials its own way (the ``AWS_*`` environment, config
files, instance metadata).

:func:`create_exclusive` writes an object only if no object has its key (S3's conditional
write, ``If-None-Match: *``, through boto3): the commit point of a remote Parquet folder
(:mod:`kbatch.tables._remotefolder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kbatch.errors import CommitConflictError, StorageError

__all__ = ["S3_SCHEMES", "create_exclusive", "delta_options", "iceberg_properties", "is_s3", "pyarrow_url", "s3_client",
           "split_url"]

#: The URL schemes of S3 (pyarrow's ``S3FileSystem``).
S3_SCHEMES: Final = ("s3", "s3a")

#: pyarrow S3FileSystem options -> (pyiceberg FileIO property, deltalake storage option)
_S3: Final = {
    "access_key": ("s3.access-key-id", "AWS_ACCESS_KEY_ID"),
    "secret_key": ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY"),
    "session_token": ("s3.session-token", "AWS_SESSION_TOKEN"),
    "region": ("s3.region", "AWS_REGION"),
    "anonymous": ("s3.anonymous", "AWS_SKIP_SIGNATURE"),
    "force_virtual_addressing": ("s3.force-virtual-addressing", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"),
    "connect_timeout": ("s3.connect-timeout", "AWS_CONNECT_TIMEOUT"),
    "request_timeout": ("s3.request-timeout", "AWS_TIMEOUT"),
}

#: pyarrow options about pyarrow's own behaviour, not where or who: nothing to pass on.
_PYARROW_ONLY: Final = frozenset({
    "background_writes", "allow_bucket_creation", "allow_bucket_deletion", "allow_delayed_open",
    "check_directory_existence_before_creation", "load_frequency", "default_metadata", "retry_strategy",
})


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key prefix)`` of ``s3://bucket/prefix``.

    >>> split_url("s3://lake/kafka/raw/")
    ('s3', 'lake', 'kafka/raw')
    """
    scheme, _, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    return scheme.lower(), bucket, prefix.strip("/")


def is_s3(url: str) -> bool:
    """Whether ``url`` is on S3 (``s3://``, ``s3a://``)."""
    return "://" in url and split_url(url)[0] in S3_SCHEMES


def pyarrow_url(url: str) -> str:
    """``url`` as pyarrow's filesystems name it (``s3a://``, Hadoop's name, is ``s3://``).

    >>> pyarrow_url("s3a://lake/t")
    's3://lake/t'
    """
    return f"s3://{url.split('://', 1)[1]}" if split_url(url)[0] == "s3a" else url


def _endpoint(options: Mapping[str, Any]) -> str | None:
    """``endpoint_override`` with its scheme (pyarrow takes the scheme apart, ``scheme=http``)."""
    endpoint = options.get("endpoint_override")
    if not endpoint:
        return None
    endpoint = str(endpoint)
    return endpoint if "://" in endpoint else f"{options.get('scheme', 'https')}://{endpoint}"


def _translated(url: str, options: Mapping[str, Any], library: str, column: int) -> dict[str, str]:
    if not options:
        return {}
    if not is_s3(url):
        raise ValueError(f"--storage-option for a {split_url(url)[0]}:// OUT is not passed to {library} yet "
                         "(S3 only): give its credentials the library's own way (environment, config)")
    out: dict[str, str] = {}
    for key, value in options.items():
        if key in _S3:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out[_S3[key][column]] = text
        elif key not in _PYARROW_ONLY and key not in ("endpoint_override", "scheme"):
            raise ValueError(f"--storage-option {key} has no {library} equivalent kbatch knows; "
                             f"passed on: endpoint_override, scheme, {', '.join(_S3)}")
    return out


def iceberg_properties(url: str, options: Mapping[str, Any]) -> dict[str, str]:
    """pyiceberg FileIO properties (``s3.endpoint``, ``s3.access-key-id``, ...) of pyarrow's
    ``storage_options`` for an OUT at ``url``.

    >>> iceberg_properties("s3://lake/t", {"endpoint_override": "127.0.0.1:9000", "scheme": "http",
    ...                                    "access_key": "k", "region": "eu-west-1"})
    {'s3.access-key-id': 'k', 's3.region': 'eu-west-1', 's3.endpoint': 'http://127.0.0.1:9000'}
    """
    out = _translated(url, options, "pyiceberg", 0)
    endpoint = _endpoint(options)
    if endpoint:
        out["s3.endpoint"] = endpoint
    return out


def delta_options(url: str, options: Mapping[str, Any]) -> dict[str, str]:
    """deltalake ``storage_options`` (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) of pyarrow's
    ``storage_options`` for an OUT at ``url``.

    >>> delta_options("s3://lake/t", {"endpoint_override": "http://127.0.0.1:9000", "secret_key": "s"})
    {'AWS_SECRET_ACCESS_KEY': 's', 'AWS_ENDPOINT_URL': 'http://127.0.0.1:9000', 'AWS_ALLOW_HTTP': 'true'}
    """
    out = _translated(url, options, "deltalake", 1)
    endpoint = _endpoint(options)
    if endpoint:
        out["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    return out


def _client(options: Mapping[str, Any]) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ImportError("boto3") from None  # _open_sink: "pip install 'kbatch[s3]'"
    kw: dict[str, Any] = {}
    endpoint = _endpoint(options)
    if endpoint:
        kw["endpoint_url"] = endpoint
    for ours, theirs in (("access_key", "aws_access_key_id"), ("secret_key", "aws_secret_access_key"),
                         ("session_token", "aws_session_token"), ("region", "region_name")):
        if options.get(ours):
            kw[theirs] = str(options[ours])
    config: dict[str, Any] = {}
    if options.get("anonymous"):
        from botocore import UNSIGNED

        config["signature_version"] = UNSIGNED
    if options.get("force_virtual_addressing"):
        config["s3"] = {"addressing_style": "virtual"}
    return boto3.client("s3", config=Config(**config), **kw)


def s3_client(options: Mapping[str, Any]) -> Any:
    """A boto3 S3 client for pyarrow's S3 ``storage_options`` (endpoint, credentials)."""
    return _client(options)


def create_exclusive(url: str, data: bytes, options: Mapping[str, Any]) -> None:
    """Write ``data`` to the object ``url`` (``s3://bucket/key``) unless an object has that key:
    then :class:`~kbatch.errors.CommitConflictError` (S3's ``If-None-Match: *``; a store that
    ignores the header would let the later write win, which kbatch cannot tell).

    ``options``: pyarrow's S3 storage options, for the endpoint and credentials.
    """
    _, bucket, key = split_url(url)
    client = _client(options)
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except Exception as exc:  # botocore's ClientError (and connection errors)
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise CommitConflictError(f"{url} exists: another run committed it first", table=url) from None
        raise StorageError(f"cannot write {url}: {exc}", url=url) from exc
