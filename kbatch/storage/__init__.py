"""Where bytes live: a local path (memory-mapped) or any filesystem ``pyarrow.fs`` reaches
(S3, GCS, Azure, HDFS, fsspec), listed in one call and read in ranges with read-ahead.

``_location``: :class:`Location` (a filesystem and a path), :func:`locate`, listings, small
reads and :class:`RangeReader`. A base layer beside :mod:`kbatch.codec`: it imports only the
standard library, ``kbatch.errors`` and (when a target is remote) pyarrow. The log reader,
the table writers and the jobs all reach storage through this face.
"""

from ._location import (
    CHUNK,
    Entry,
    Location,
    RangeReader,
    StoragePath,
    io_pool,
    is_remote,
    join,
    list_files,
    locate,
    parse_options,
    prefetch,
    read_small,
)

__all__ = [
    "CHUNK",
    "Entry",
    "Location",
    "RangeReader",
    "StoragePath",
    "io_pool",
    "is_remote",
    "join",
    "list_files",
    "locate",
    "parse_options",
    "prefetch",
    "read_small",
]
