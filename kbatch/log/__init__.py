"""Kafka log directories without a broker: segments, indexes, seeks, read_committed, a writer.

What a broker keeps on disk under each ``log.dirs`` root (all integers big-endian)::

    <root>/<topic>-<partition>/               a partition directory; skipped when its name ends
                                              in -delete, -future or -stray (being deleted/moved)
        00000000000000001234.log              segment: record batches back to back, exactly as
                                              kbatch.decode reads them; named by the 20-digit
                                              zero-padded base offset (its first offset)
        00000000000000001234.index            offset index: offset -> byte position in the .log
        00000000000000001234.timeindex        time index: largest timestamp so far -> offset
        00000000000000001234.txnindex         aborted transactions whose ABORT marker is in the
                                              segment (these three files' entries:
                                              kbatch.log._indexes; a batch's frame: _frames)
        00000000000000001234.snapshot         producer state snapshot (not read here)
        *.deleted *.cleaned *.swap            leftovers of deletion, cleaning, compaction: skipped
        leader-epoch-checkpoint               text: "0" (version), count, then "epoch startOffset"
        partition.metadata                    text: "version: 0", "topic_id: <base64url uuid>"
    <root>/log-start-offset-checkpoint        text, "topic partition offset" lines (kbatch.log._checkpoint):
    <root>/recovery-point-offset-checkpoint   a log starts at max(its log start offset checkpoint,
    <root>/replication-offset-checkpoint      its first segment's base offset), as the broker's;
    <root>/cleaner-offset-checkpoint          the others are read for reporting, all verified

Everything works from the ``.log`` files alone; an index is a hint, used only to go faster, and
read on a segment's first seek that needs it (opening a partition reads none). A file whose
entries do not increase is not used; each entry a seek uses is first checked against
the batch it names (one header read, the first time): an ``.index`` position must frame a
complete batch holding the entry's offset; the batch holding a ``.timeindex`` entry's offset must
have the entry's timestamp as its largest and the batch before it a smaller one. An entry that
fails is noted (:attr:`Segment.notes`, :attr:`LogDir.notes`) and the one before it used (or the
start of the segment). Reads follow the broker: an offset seek looks the position up in
``.index`` and scans forward to the first batch whose last offset reaches it; a timestamp seek
looks up ``.timeindex``, then ``.index``, then scans to the first record whose timestamp reaches
it (Kafka's ListOffsets), so both give what a linear scan gives, with the caller's
``on_corruption`` throughout.

>>> import kbatch, tempfile
>>> from kbatch.log import LogWriter, open_log
>>> root = tempfile.mkdtemp()
>>> with LogWriter(root, "orders", 0, segment_bytes=200) as w:
...     for i in range(4):
...         _ = w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
>>> log = open_log(f"{root}/orders-0")
>>> log.topic, log.partition, [s.base_offset for s in log.segments]
('orders', 0, [0, 2])
>>> log.read(start_offset=1, end_offset=3).values()
[b'v1', b'v2']
>>> log.read(start_timestamp=1002).records["offset"].tolist()
[2, 3]
"""

from __future__ import annotations

from ._arrow import iter_log_arrow as iter_log_arrow
from ._arrow import log_batches as log_batches
from ._arrow import log_to_arrow as log_to_arrow
from ._checkpoint import CLEANER as CLEANER
from ._checkpoint import update_checkpoint as update_checkpoint
from ._discover import SEGMENT_NAME as SEGMENT_NAME
from ._discover import deeper_roots as deeper_roots
from ._discover import describe_topics as describe_topics
from ._discover import logs_deeper as logs_deeper
from ._discover import partition_name
from ._discover import topics_in as topics_in
from ._frames import scan_headers as scan_headers
from ._indexes import OFFSET_INDEX_DTYPE, TIME_INDEX_DTYPE, TXN_INDEX_DTYPE
from ._indexes import read_index as read_index
from ._logdir import IsolationLevel as IsolationLevel
from ._logdir import LogDir, Unread, open_log
from ._logdir import logger as logger
from ._logwriter import LogWriter
from ._open_logs import Replicas as Replicas
from ._open_logs import open_logs
from ._predicate import COLUMNS as COLUMNS
from ._predicate import FilterError as FilterError
from ._predicate import Term as Term
from ._predicate import bounds as bounds
from ._predicate import constant_holds as constant_holds
from ._predicate import empty as empty
from ._predicate import normalize as normalize
from ._producer_snapshot import read_snapshot as read_snapshot
from ._scan import SCAN_COLUMNS as SCAN_COLUMNS
from ._scan import ScanStats, scan_logs
from ._scan import scan_tables as scan_tables
from ._scan import window_end as window_end
from ._scan_values import value_scan as value_scan
from ._segment import OnCorruption as OnCorruption
from ._segment import Segment, Skipped
from ._timeindex import IndexSummary as IndexSummary
from ._timeindex import build_time_index as build_time_index
from ._timeindex import default_index_dir as default_index_dir

__all__ = [
    "OFFSET_INDEX_DTYPE",
    "TIME_INDEX_DTYPE",
    "TXN_INDEX_DTYPE",
    "LogDir",
    "LogWriter",
    "ScanStats",
    "Segment",
    "Skipped",
    "Unread",
    "open_log",
    "open_logs",
    "partition_name",
    "scan_logs",
]
