"""A Spark standalone cluster on 127.0.0.1 (a master and two workers, separate JVMs started with
pyspark's own ``bin/spark-class``) reading s3:// from the moto server: equal to the local copies."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kbatch.log import open_logs

pytest.importorskip("pyarrow")
pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java (17+) and none is installed", allow_module_level=True)

REPO = str(Path(__file__).resolve().parents[2])
SPARK_HOME = os.path.dirname(pyspark.__file__)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ready, procs, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a Spark process exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers; every JVM stopped after."""
    work = tmp_path_factory.mktemp("spark")
    env = {
        **os.environ,
        "SPARK_HOME": SPARK_HOME,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_WORKER_DIR": str(work),
        "SPARK_LOG_DIR": str(work),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([REPO, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]),
    }
    port, ui = _port(), _port()
    spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
    procs: list[subprocess.Popen] = []
    log = open(work / "daemons.log", "wb")  # noqa: SIM115 - closed at teardown
    try:
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui)], env=env, stdout=log, stderr=subprocess.STDOUT))
        master = f"spark://127.0.0.1:{port}"
        for _ in range(2):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", str(_port()), "--cores", "1", "--memory", "1g", master],
                env=env, stdout=log, stderr=subprocess.STDOUT))

        def alive() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    return int(json.load(r).get("aliveworkers", 0)) == 2
            except OSError:
                return False

        _wait("two workers to register", alive, procs)
        yield master
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def test_kbatch_convert_on_the_cluster(cluster, backup, expected_rows, read_rows, s3_options, tmp_path):
    """``kbatch convert s3://kbatch/backup OUT --master spark://...`` (first: it needs the cores)."""
    import pyarrow.dataset as pads


    out = tmp_path / "out"
    paths = os.pathsep.join([REPO, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    cmd = [
        sys.executable, "-m", "kbatch", "convert", backup, str(out), "--recursive", "--no-fail-on-data-loss",
        "--master", cluster, "-q",
        *[f"--storage-option={k}={v}" for k, v in s3_options.items()],
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
        "--conf", f"spark.executorEnv.PYTHONPATH={paths}",
        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
    ]
    env = {**os.environ, "PYTHONPATH": paths, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_rows(pads.dataset(out, format="parquet", partitioning="hive")) == expected_rows


def test_kbatch_convert_into_iceberg_on_the_cluster(cluster, tmp_path):
    """``kbatch convert ROOT OUT --format iceberg --master spark://...`` (before the session below
    takes the cores): the workers' executors write the files, this process commits them; read back
    with pyiceberg equal to ``LogDir.read``; a rerun commits nothing."""
    pytest.importorskip("pyiceberg")
    from support.tables import rows_of_root, rows_of_table, write_log

    from kbatch.cli._sample import write_sample
    from kbatch.tables import default_catalog

    root, out = tmp_path / "root", tmp_path / "out"
    write_sample(root)
    write_log(root, "events", 0, 50)
    paths = os.pathsep.join([REPO, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    cmd = [
        sys.executable, "-m", "kbatch", "convert", str(root), str(out), "--format", "iceberg", "--subscribe",
        "orders,events", "--engine", "spark", "--master", cluster, "--json-summary",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
        "--conf", f"spark.executorEnv.PYTHONPATH={paths}",
        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
    ]
    env = {**os.environ, "PYTHONPATH": paths, "PYSPARK_PYTHON": sys.executable}
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["engine"] == "spark" and summary["records"] == 950
    assert [(t["table"], t["records"]) for t in summary["tables"]] == [("kafka.events", 50), ("kafka.orders", 900)]
    catalog = default_catalog(out)
    snapshots = {}
    for topic in ("orders", "events"):
        table = catalog.load_table(f"kafka.{topic}")
        assert rows_of_table(table.scan().to_arrow()) == rows_of_root(root, [topic])
        snapshots[topic] = table.current_snapshot().snapshot_id
    again = subprocess.run([*cmd, "--mode", "append"], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = json.loads(again.stdout.strip().splitlines()[-1])
    assert rerun["records"] == 0 and not rerun["tables"] and len(rerun["since"]) == 2
    catalog = default_catalog(out)
    assert {t: catalog.load_table(f"kafka.{t}").current_snapshot().snapshot_id for t in snapshots} == snapshots
    assert not (out / "_kbatch_staging").exists()


@pytest.fixture(scope="module")
def spark(cluster):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(cluster)
        .appName("kbatch-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executorEnv.PYTHONPATH", os.pathsep.join([REPO, *paths]))
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import kbatch.spark

    kbatch.spark.register(session)
    yield session
    session.stop()


def test_cluster_reads_the_bucket_as_the_local_copies(spark, backup, backup_local, s3_options):
    df = (spark.read.format("kafka-log").option("recursiveFileLookup", "true").option("maxPartitionBytes", "3000")
          .option("failOnDataLoss", "false")  # events-0's replicas disagree: the longest copy
          .options(**{f"storage.{k}": str(v) for k, v in s3_options.items()}).load(backup))
    rows = df.select("topic", "partition", "offset", "key", "value", "timestamp").collect()
    assert df.rdd.getNumPartitions() >= 2
    got = sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    want = []
    for log in open_logs(backup_local, recursive=True, on_disagreement="note"):
        t = log.read()
        want += [(log.topic, log.partition, o, k, v)
                 for o, k, v in zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)]
    assert got == sorted(want) and len(got) == 455
    # the tasks ran on the two workers' executors, not in the driver
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors == 3  # two executors and the driver's block manager


def test_decode_batches_and_the_stream_on_the_cluster(spark, backup, backup_local, s3_options, expected_rows,
                                                     tmp_path):
    import kbatch.spark
    from kbatch.log import LogDir

    # decode_batches: a DataFrame of raw record batches (one row per batch) decoded by the executors
    part = LogDir(backup_local / "broker-1/kafka-logs/orders-0")
    raw = []
    for seg in part.segments:
        for h in seg.scan().tolist():
            pos, length = h[0], h[6]
            raw.append((bytes(seg.data[pos : pos + 12 + length]),))
    df = spark.createDataFrame(raw, "value binary").repartition(2)
    decoded = kbatch.spark.decode_batches(df, topic="orders", partition=0)
    got = sorted((r.offset, bytes(r.value)) for r in decoded.select("offset", "value").collect())
    assert got == [(o, v) for t, p, o, k, v in expected_rows if (t, p) == ("orders", 0)]
    # the streaming reader over s3://, availableNow, into parquet
    out, chk = tmp_path / "out", tmp_path / "chk"
    q = (spark.readStream.format("kafka-log").option("startingOffsets", "earliest")
         .option("recursiveFileLookup", "true").option("failOnDataLoss", "false")
         .options(**{f"storage.{k}": str(v) for k, v in s3_options.items()}).load(backup)
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(chk))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    streamed = spark.read.parquet(str(out)).select("topic", "partition", "offset").collect()
    assert sorted((r.topic, r.partition, r.offset) for r in streamed) == [(t, p, o) for t, p, o, _, _ in expected_rows]


def test_typed_values_on_the_cluster(spark, tmp_path):
    """``decode_values`` and ``valueFormat=avro`` decode in the workers' executors (the registry
    pickled to them): equal to fastavro's reading of the same Confluent-framed records."""
    pytest.importorskip("fastavro")
    from support.typed_root import KEY, KEY_ID, V2, read_avro, write_typed_root

    import kbatch.spark
    from kbatch.values import Registry

    made = write_typed_root(tmp_path / "typed")
    root = str(tmp_path / "typed")
    want = sorted((p, o, read_avro(k, made["writers"], KEY), read_avro(v, made["writers"], V2))
                  for (t, p), rows in made["records"].items() if t == "orders" for o, k, v in rows)
    df = spark.read.format("kafka-log").option("subscribe", "orders").option("minPartitions", "2").load(root)
    decoded = kbatch.spark.decode_values(df, Registry.from_log_dirs(root), topic="orders")
    decoded = kbatch.spark.decode_values(decoded, Registry.from_log_dirs(root), column="key", reader_schema=KEY_ID)
    src = (spark.read.format("kafka-log").option("subscribe", "orders").option("minPartitions", "2")
           .option("valueFormat", "avro").option("keyFormat", "avro").option("keyReaderSchema", str(KEY_ID))
           .load(root))
    for frame in (decoded, src):
        rows = frame.select("partition", "offset", "key", "value").collect()
        got = sorted((r.partition, r.offset, r.key, _utc(r.value.asDict(recursive=True))) for r in rows)
        assert got == want


def _utc(obj):
    """Collected timestamps (naive local times) as fastavro's (UTC)."""
    import datetime

    if isinstance(obj, dict):
        return {k: _utc(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_utc(v) for v in obj]
    if isinstance(obj, datetime.datetime) and obj.tzinfo is None:
        return obj.astimezone(datetime.timezone.utc)
    return obj
