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
