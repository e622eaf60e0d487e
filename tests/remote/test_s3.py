"""Reading logs from a real S3-compatible server (moto's) equals reading the local copies."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogDir, Segment, open_log, open_logs

pa = pytest.importorskip("pyarrow")


def _same(remote: LogDir, local: LogDir, **read) -> None:
    a, b = remote.read(**read), local.read(**read)
    assert a.records["offset"].tolist() == b.records["offset"].tolist()
    assert a.values() == b.values() and a.keys() == b.keys()
    assert a.records["timestamp"].tolist() == b.records["timestamp"].tolist()
    assert len(b) > 0 or not read


@pytest.mark.parametrize("part", ["broker-1/kafka-logs/orders-0", "broker-1/kafka-logs/events-0",
                                  "broker-2/disk-b/kafka-logs/clicks-0"])
def test_open_log_reads_what_the_local_copy_holds(backup, backup_local, s3_options, part):
    remote = open_log(f"{backup}/{part}", storage_options=s3_options)
    local = LogDir(backup_local / part)
    assert remote.topic == local.topic and remote.partition == local.partition
    assert remote.topic_id == local.topic_id and remote.leader_epochs == local.leader_epochs
    assert [s.base_offset for s in remote.segments] == [s.base_offset for s in local.segments]
    assert all(s.is_remote for s in remote.segments) and not any(s.is_remote for s in local.segments)
    _same(remote, local)
    _same(remote, local, start_offset=7, end_offset=19)
    _same(remote, local, start_timestamp=1_013)
    assert remote.offset_for_timestamp(1_017) == local.offset_for_timestamp(1_017) == 17
    assert remote.to_arrow().equals(local.to_arrow())


def test_iter_tables_reads_each_range_in_a_few_requests(backup, backup_local, s3_options):
    part = "broker-1/kafka-logs/orders-0"
    remote = open_log(f"{backup}/{part}", storage_options=s3_options)
    got = [t.records["offset"].tolist() for t in remote.iter_tables(chunk_bytes=700)]
    want = [t.records["offset"].tolist() for t in LogDir(backup_local / part).iter_tables(chunk_bytes=700)]
    assert got == want
    for seg in remote.segments:
        batches = len(LogDir(backup_local / part).segments[0].scan())
        # one window per segment (the chunk is 16 MiB): framing and decoding share it
        assert seg._reader.requests <= 2 < batches


def test_windows_bound_memory_and_frame_across_their_ends(backup, backup_local, s3_options):
    part = "broker-1/kafka-logs/orders-0"
    local = LogDir(backup_local / part).segments[0]
    seg = open_log(f"{backup}/{part}", storage_options=s3_options).segments[0]
    seg._reader.chunk = 100  # windows smaller than one batch
    assert seg.scan().tolist() == local.scan().tolist()
    assert seg._reader.requests > 3
    tables = list(open_log(f"{backup}/{part}", storage_options=s3_options).iter_tables(chunk_bytes=300))
    assert sum(len(t) for t in tables) == len(LogDir(backup_local / part).read())


def test_segment_by_url(backup, backup_local, s3_options):
    name = "broker-1/kafka-logs/orders-1/00000000000000000000.log"
    seg = Segment(f"{backup}/{name}", storage_options=seg_opts(s3_options))
    local = Segment(backup_local / name)
    assert seg.size == local.size and seg.url == f"{backup}/{name}"
    assert seg.scan().tolist() == local.scan().tolist()
    assert seg.index is not None and seg.index.tolist() == local.index.tolist()


def seg_opts(opts):
    return dict(opts)


def test_filesystem_argument(backup, backup_local, s3_options):
    fs = pa.fs.S3FileSystem(**s3_options)
    remote = open_log("kbatch/backup/broker-1/kafka-logs/orders-1", filesystem=fs)
    _same(remote, LogDir(backup_local / "broker-1/kafka-logs/orders-1"))


def test_open_logs_one_root(backup, backup_local, s3_options):
    got = open_logs(f"{backup}/broker-1/kafka-logs", storage_options=s3_options)
    want = open_logs(backup_local / "broker-1" / "kafka-logs")
    assert [(d.topic, d.partition) for d in got] == [(d.topic, d.partition) for d in want]
    for a, b in zip(got, want, strict=True):
        _same(a, b)


def test_whole_backup_recursive_chooses_replicas(backup, backup_local, s3_options):
    notes: list[str] = []
    with pytest.raises(kbatch.ReplicasDisagreeError, match="events-0: replicas disagree from offset 60"):
        open_logs(backup, recursive=True, storage_options=s3_options)
    got = open_logs(backup, recursive=True, notes=notes, storage_options=s3_options, on_disagreement="note")
    local_notes: list[str] = []
    want = open_logs(backup_local, recursive=True, notes=local_notes, on_disagreement="note")
    key = [(d.topic, d.partition) for d in got]
    assert key == [(d.topic, d.partition) for d in want]
    assert key == [("clicks", 0), ("events", 0), ("orders", 0), ("orders", 1)]
    chosen = {(d.topic, d.partition): d.root for d in got}
    # meta.properties read from the bucket; the tiered copy (no root files) is one of orders-0's replicas
    assert {d.cluster_id for d in got} == {"3Db5QLSqSZieL3rJBUUegA"}
    assert not any("different logs" in n for n in notes)
    assert chosen[("orders", 0)].endswith("broker-1/kafka-logs")  # 300 offsets against 225
    assert chosen[("orders", 0)] != f"{backup}/tiered"
    assert any("orders-0: 3 replicas" in n for n in notes)
    # events-0's replica on broker-3 has other records at offset 60
    disagree = [n for n in notes if "disagree" in n]
    assert len(disagree) == 1 and "events-0: replicas disagree from offset 60" in disagree[0]
    assert sum("disagree" in n for n in local_notes) == 1
    for a, b in zip(got, want, strict=True):
        _same(a, b)


def test_replicas_all(backup, s3_options):
    got = open_logs(backup, recursive=True, replicas="all", storage_options=s3_options, verify_replicas=False)
    roots = sorted(d.root for d in got if (d.topic, d.partition) == ("orders", 0))
    assert roots == sorted([f"{backup}/broker-1/kafka-logs", f"{backup}/broker-2/disk-a/kafka-logs",
                            f"{backup}/tiered"])


def test_tiered_storage_layout(backup, backup_local, s3_options):
    (log,) = open_logs(f"{backup}/tiered", recursive=True, storage_options=s3_options)
    assert (log.topic, log.partition, log.topic_id) == ("orders", 0, "MWJ6FHTfRYy67jzwZdeqSQ")
    assert all(s.segment_id is not None and s.index is not None for s in log.segments)
    _same(log, LogDir(backup_local / "broker-1/kafka-logs/orders-0"))
    (local,) = open_logs(backup_local / "tiered", recursive=True)
    _same(local, LogDir(backup_local / "broker-1/kafka-logs/orders-0"))


def test_nothing_found_is_said(backup, s3_options, tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"no partition directory.*1 files in 3 directories"):
        open_logs(tmp_path, recursive=True)
    with pytest.raises(FileNotFoundError, match="no partition directory"):
        open_logs(f"{backup}/broker-1/kafka-logs/orders-0", recursive=True, storage_options=s3_options)


def test_missing_bucket(s3_server, s3_options):
    with pytest.raises(kbatch.StorageError, match="no-such-bucket") as e:
        open_logs("s3://no-such-bucket/backup", recursive=True, storage_options=s3_options)
    assert "no-such-bucket" in e.value.url
    with pytest.raises(kbatch.StorageError, match="no-such-bucket"):
        open_log("s3://no-such-bucket/backup/t-0", storage_options=s3_options)


def test_object_deleted_between_listing_and_reading(backup, backup_local, s3_client, s3_options):
    key = "scratch/gone/kafka-logs/orders-1/00000000000000000000.log"
    src = backup_local / "broker-1/kafka-logs/orders-1/00000000000000000000.log"
    s3_client.put_object(Bucket="kbatch", Key=key, Body=src.read_bytes())
    log = open_log("s3://kbatch/scratch/gone/kafka-logs/orders-1", storage_options=s3_options)
    s3_client.delete_object(Bucket="kbatch", Key=key)
    with pytest.raises(kbatch.StorageError, match=r"00000000000000000000\.log") as e:
        log.read()
    assert e.value.url.endswith(key)


def test_object_cut_after_listing(backup, backup_local, s3_client, s3_options):
    key = "scratch/cut/kafka-logs/orders-1/00000000000000000000.log"
    src = (backup_local / "broker-1/kafka-logs/orders-1/00000000000000000000.log").read_bytes()
    s3_client.put_object(Bucket="kbatch", Key=key, Body=src)
    log = open_log("s3://kbatch/scratch/cut/kafka-logs/orders-1", storage_options=s3_options)
    s3_client.put_object(Bucket="kbatch", Key=key, Body=src[: len(src) // 2])
    with pytest.raises(kbatch.StorageError, match=r"00000000000000000000\.log"):
        log.read()


def test_compressed_tiered_segment_is_refused(backup, backup_local, s3_client, s3_options):
    src = backup_local / "broker-1/kafka-logs/orders-1/00000000000000000000.log"
    stem = f"scratch/packed/orders-{'A' * 22}/1/00000000000000000000-{'B' * 22}"
    s3_client.put_object(Bucket="kbatch", Key=stem + ".log", Body=src.read_bytes())
    s3_client.put_object(Bucket="kbatch", Key=stem + ".rsm-manifest", Body=b'{"compression":true}')
    with pytest.raises(kbatch.UnsupportedError, match="rsm-manifest"):
        open_logs("s3://kbatch/scratch/packed", recursive=True, storage_options=s3_options)


def test_dump_a_url_prints_what_the_local_file_gives(backup, backup_local, s3_options, capsys):
    from kbatch.__main__ import main

    name = "broker-1/kafka-logs/orders-0/00000000000000000000"
    opts = [f"--storage-option={k}={v}" for k, v in s3_options.items()]
    for suffix in (".log", ".index", ".timeindex"):
        assert main(["dump", "--deep-iteration", "--files", f"{backup}/{name}{suffix}", *opts]) == 0
        remote = capsys.readouterr().out
        assert main(["dump", "--deep-iteration", "--files", str(backup_local / (name + suffix))]) == 0
        local = capsys.readouterr().out
        assert remote.replace(f"{backup}/", "") == local.replace(f"{backup_local}/", "")
        assert "baseOffset" in local or "offset:" in local
    assert main(["dump", "--files", "s3://kbatch/backup/nothing-0/00000000000000000000.log", *opts]) == 1
    assert "nothing-0/00000000000000000000.log" in capsys.readouterr().err


@pytest.mark.parametrize("chunk", [100, 1 << 20])
def test_corrupt_batch_raises_or_is_skipped_as_locally(backup, backup_local, s3_client, s3_options, tmp_path, chunk):
    import shutil

    src = backup_local / "broker-1/kafka-logs/orders-1"
    part = tmp_path / "orders-1"
    shutil.copytree(src, part)
    seg = part / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    heads = LogDir(part).segments[0].scan()
    bad = int(heads["position"][3])
    raw[bad + 8 : bad + 12] = (3).to_bytes(4, "big")  # a batchLength below the minimum
    raw[int(heads["position"][5]) + 40] ^= 0xFF  # and a CRC mismatch further on
    seg.write_bytes(bytes(raw))
    for f in part.iterdir():
        s3_client.upload_file(str(f), "kbatch", f"scratch/corrupt-{chunk}/orders-1/{f.name}")
    local = LogDir(part)
    remote = open_log(f"s3://kbatch/scratch/corrupt-{chunk}/orders-1", storage_options=s3_options)
    for s in remote.segments:
        s._reader.chunk = chunk
    with pytest.raises(kbatch.CorruptRecordError) as want:
        local.read()
    with pytest.raises(kbatch.CorruptRecordError) as got:
        remote.read()
    assert (got.value.reason.split(" in ")[0], got.value.position) == (want.value.reason.split(" in ")[0],
                                                                     want.value.position)
    a, b = remote.read(on_corruption="skip"), local.read(on_corruption="skip")
    assert a.records["offset"].tolist() == b.records["offset"].tolist() and len(b) > 0
    assert [(s.position, s.length, s.reason.replace(str(remote.path), "P")) for s in remote.skipped] == [
        (s.position, s.length, s.reason.replace(str(local.path), "P")) for s in local.skipped]
    assert len(local.skipped) == 2


def test_permission_denied_names_the_object(locked_s3):
    url, key, secret = locked_s3
    opts = {"endpoint_override": url, "scheme": "http", "access_key": key, "secret_key": secret,
            "region": "us-east-1"}
    (log,) = open_logs("s3://locked/root", storage_options=opts)  # listing is allowed
    with pytest.raises(kbatch.StorageError, match="permission denied") as e:
        log.read()
    assert e.value.url == "s3://locked/root/t-0/00000000000000000000.log"
    bad = {**opts, "access_key": "nobody"}
    with pytest.raises(kbatch.StorageError, match=r"cannot list s3://locked/root: .*(Access Key|ACCESS_KEY)"):
        open_logs("s3://locked/root", storage_options=bad)
