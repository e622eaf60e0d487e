"""Names of the values Kafka's record batch attributes carry, written once for Python.

``attributes`` bits 0-2 of a RecordBatch (and of a legacy message) hold the compression
codec; bit 3 the timestamp type. The ids are Kafka's (``CompressionType``,
``TimestampType``); the names are its ``compression.type`` / ``message.timestamp.type``
values, lower-case.

>>> CODEC_NAMES[ZSTD], COMPRESSION_CODECS["lz4"]
('zstd', 3)
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CODEC_NAMES",
    "COMPRESSION_CODECS",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "TIMESTAMP_TYPES",
    "ZSTD",
]

NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

#: Codec id -> Kafka's name for it (``compression.type``).
CODEC_NAMES: Final = {
    NONE: "none",
    GZIP: "gzip",
    SNAPPY: "snappy",
    LZ4: "lz4",
    ZSTD: "zstd",
}
#: Kafka's name -> codec id (what ``compression=`` accepts).
COMPRESSION_CODECS: Final = {name: codec for codec, name in CODEC_NAMES.items()}
#: ``timestamp_type=`` name -> attribute bit 3.
TIMESTAMP_TYPES: Final = {"create": 0, "log_append": 1}
