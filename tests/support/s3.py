"""Helpers of the tests against the moto server (tests/remote/)."""

from __future__ import annotations

import uuid


def fresh_prefix(s3_client, bucket: str) -> str:
    """``s3://<bucket>/<new prefix>`` (the bucket made if it is not there)."""
    try:
        s3_client.create_bucket(Bucket=bucket)
    except s3_client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return f"s3://{bucket}/{uuid.uuid4().hex[:8]}"


def storage_args(s3_options) -> list[str]:
    """``kbatch convert``'s ``--storage-option`` arguments for the moto server."""
    return [f"--storage-option={k}={v}" for k, v in s3_options.items()]


def keys_under(s3_client, url: str, markers: bool = False) -> list[str]:
    """The object keys under ``url`` (``s3://bucket/prefix``), relative to it, sorted; directory
    markers (keys ending in ``/``) only with ``markers``."""
    bucket, prefix = url[len("s3://"):].split("/", 1)
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
    return sorted(o["Key"][len(prefix) + 1:] for o in listed if markers or not o["Key"].endswith("/"))
