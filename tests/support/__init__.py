"""Helpers shared by the tests (importable as ``support.x``: pytest puts ``tests/`` on the path).

- ``refcodec``: a plain Python RecordBatch writer, independent of kbatch;
- ``expect``: compares a RecordTable with a vector's expected fields;
- ``kafka_mock``: librdkafka's in-process mock cluster, a real Kafka peer;
- ``protocol_defs``, ``protocol_strategies``: Kafka protocol definitions and hypothesis strategies;
- ``roots``: ``log.dirs`` roots with a cluster id and a topic id (backups of several roots);
- ``switches``: which heavy test tiers run;
- ``tree``: files of the source checkout (README, docs, setup.py), skipped outside one;
- ``layouts``: folders laid out the ways a user gets wrong (logs deeper, misnamed segments).
"""
