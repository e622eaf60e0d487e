"""Control batches laid out by hand: transaction markers and KRaft's control records (Kafka's
ControlRecordType 2-6), for the tests of ``kbatch dump`` and of the convert summary."""

from __future__ import annotations

import struct

from crc32c import crc32c

import kbatch

# KRaft control record values, laid out by hand (flexible messages at version 0; their first field is
# their Version): SnapshotHeaderRecord, SnapshotFooterRecord, KRaftVersionRecord, LeaderChangeMessage
HEADER = struct.pack(">hq", 0, 10000) + b"\x00"
FOOTER = struct.pack(">h", 0) + b"\x00"
KRAFT_VERSION = struct.pack(">hh", 0, 1) + b"\x00"
VOTER_1 = b"\x02" + struct.pack(">i", 1) + b"\x00"          # compact array of one Voter {VoterId 1}
LEADER_CHANGE = struct.pack(">hi", 0, 1) + VOTER_1 + VOTER_1 + b"\x00"


def control_batch(records: list[tuple[int, bytes]], base_offset: int, timestamp: int = 50) -> bytes:
    """A v2 control batch holding one record per (control type, value): the batch encoded as data,
    then its control bit set and its CRC computed again."""
    keys = [struct.pack(">hh", 0, kind) for kind, _ in records]
    raw = bytearray(kbatch.encode([v for _, v in records], keys=keys, timestamps=[timestamp] * len(records),
                                  base_offset=base_offset))
    raw[22] |= 0x20
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)
