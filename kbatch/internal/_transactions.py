"""Transactions from ``__transaction_state``: the transaction coordinator's state per transactional id."""

from __future__ import annotations

from typing import Any

from ._records import OnUnknown
from ._replay import latest, located

__all__ = ["TRANSACTION_STATES", "transactions"]

TOPIC = "__transaction_state"

#: TransactionLogValue.TransactionStatus -> Kafka's TransactionState name
TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                      5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


def transactions(source: Any, *, history: bool = False, on_unknown: OnUnknown = "raise") -> Any:
    """The state of every transactional id, as the transaction coordinator loads ``__transaction_state``.

    Parameters
    ----------
    source : path, LogDir or RecordTable
        A ``log.dirs`` root, one ``__transaction_state-<n>`` directory, or a
        RecordTable of one partition.
    history : bool, default False
        Every record (tombstones as rows with null values, ``timestamp`` and
        ``tombstone`` added) instead of the latest state per id.
    on_unknown : {"raise", "raw"}
        An unknown record type or version raises, or is left out.

    Returns
    -------
    pyarrow.Table
        ``transactional_id``, ``producer_id``, ``previous_producer_id``,
        ``next_producer_id`` (int64, -1 none), ``producer_epoch`` (int16),
        ``timeout_ms`` (int32), ``state`` (string, Kafka's name),
        ``partitions`` (list of ``{topic, partitions}``),
        ``last_update_timestamp``, ``start_timestamp`` (timestamp[ms]),
        ``client_transaction_version`` (int16), ``coordinator_partition``,
        ``record_offset``.

    Examples
    --------
    >>> import kbatch, tempfile
    >>> from kbatch.internal import default_registry
    >>> schema = default_registry().schema
    >>> key = b"\\x00\\x00" + schema["TransactionLogKey"].encode({"transactional_id": "tx-1"}, 0)
    >>> value = b"\\x00\\x00" + schema["TransactionLogValue"].encode({"producer_id": 42, "producer_epoch": 3,
    ...     "transaction_timeout_ms": 60000, "transaction_status": 1, "transaction_partitions": [
    ...     {"topic": "t", "partition_ids": [0]}], "transaction_last_update_timestamp_ms": 5,
    ...     "transaction_start_timestamp_ms": 4}, 0)
    >>> root = tempfile.mkdtemp()
    >>> with kbatch.LogWriter(root, "__transaction_state", 0) as w:
    ...     _ = w.append(kbatch.encode([value], keys=[key]))
    >>> row = transactions(root).to_pylist()[0]
    >>> row["transactional_id"], row["producer_id"], row["state"], row["partitions"]
    ('tx-1', 42, 'Ongoing', [{'topic': 't', 'partitions': [0]}])
    """
    import pyarrow as pa

    records = located(source, TOPIC, "transaction", on_unknown)
    chosen = records if history else latest(records)
    rows = []
    for rec in chosen:
        r, e = rec.entry.record, rec.entry
        v = r.value
        row: dict[str, Any] = {"transactional_id": (r.key or {}).get("transactional_id")}
        if v is None:
            row.update(dict.fromkeys(("producer_id", "previous_producer_id", "next_producer_id", "producer_epoch",
                                      "timeout_ms", "state", "partitions", "last_update_timestamp",
                                      "start_timestamp", "client_transaction_version")))
        else:
            status = v["transaction_status"]
            row.update({
                "producer_id": v["producer_id"], "previous_producer_id": v.get("previous_producer_id", -1),
                "next_producer_id": v.get("next_producer_id", -1), "producer_epoch": v["producer_epoch"],
                "timeout_ms": v["transaction_timeout_ms"],
                "state": TRANSACTION_STATES.get(status, f"UNKNOWN({status})"),
                "partitions": [{"topic": p["topic"], "partitions": list(p["partition_ids"])}
                               for p in v["transaction_partitions"] or ()],
                "last_update_timestamp": v["transaction_last_update_timestamp_ms"],
                "start_timestamp": v["transaction_start_timestamp_ms"],
                "client_transaction_version": v.get("client_transaction_version", 0),
            })
        row["coordinator_partition"] = rec.partition
        row["record_offset"] = e.offset
        if history:
            row["timestamp"] = e.timestamp
            row["tombstone"] = v is None
        rows.append(row)
    ms = pa.timestamp("ms", tz="UTC")
    fields = [("transactional_id", pa.string()), ("producer_id", pa.int64()), ("previous_producer_id", pa.int64()),
              ("next_producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("timeout_ms", pa.int32()),
              ("state", pa.string()),
              ("partitions", pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))]))),
              ("last_update_timestamp", ms), ("start_timestamp", ms), ("client_transaction_version", pa.int16()),
              ("coordinator_partition", pa.int32()), ("record_offset", pa.int64())]
    if history:
        fields += [("timestamp", ms), ("tombstone", pa.bool_())]
    else:
        rows.sort(key=lambda x: x["transactional_id"])
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))
