"""Delta's derived time columns (``timestamp_day``, ``_hour``, ``_month``, ``_year``) are the UTC
calendar values of each record timestamp, before 1970 and at day and hour boundaries too."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from support.tables import kafka_batch

from kbatch.tables import DeltaSink, Ledger, OffsetRange

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

MICROS = [-1, -86_400_000_000, -86_400_000_001, 0, 86_399_999_999, 86_400_000_000, 3_599_999_999,
          1_700_000_000_000_000, 1_704_067_199_999_999, 1_704_067_200_000_000]


def test_derived_columns_are_the_utc_calendar_values(tmp_path):
    batch = kafka_batch(range(len(MICROS)))
    batch = batch.set_column(batch.schema.get_field_index("timestamp"), "timestamp",
                             pa.array(MICROS, pa.timestamp("us", "UTC")))
    sink = DeltaSink(tmp_path / "out", "errorifexists", topics=["t"],
                     partition_by=[f"{n}(timestamp)" for n in ("day", "hour", "month", "year")])
    converted = Ledger([OffsetRange("t", 0, 0, len(MICROS))])
    with sink:
        sink.open(batch.schema)
        sink.write([batch])
        sink.commit(converted, converted)
    out = deltalake.DeltaTable(str(tmp_path / "out" / "t")).to_pyarrow_table().sort_by("offset").to_pydict()
    when = [datetime.fromtimestamp(m // 1_000_000, timezone.utc) for m in MICROS]  # floor to the second
    assert out["timestamp_day"] == [w.date() for w in when]
    assert out["timestamp_hour"] == [w.strftime("%Y-%m-%d-%H") for w in when]
    assert out["timestamp_month"] == [w.strftime("%Y-%m") for w in when]
    assert out["timestamp_year"] == [w.year for w in when]
