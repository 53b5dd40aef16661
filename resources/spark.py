"""Spark session: local by default, one per process, pointable at a cluster.

Local default: `local[*]`, UTC session time zone, Arrow on, quiet logs, few shuffle partitions.

Point it at a cluster without touching code:
- `INCREMENTAL_SPARK_MASTER=spark://host:7077` (or `yarn`, `k8s://...`) sets `spark.master`;
- `SPARK_REMOTE=sc://host:15002` (PySpark's own variable) or `INCREMENTAL_SPARK_REMOTE`
  uses Spark Connect instead of a local JVM: the client then sets only `spark.sql.*` settings
  (the server owns the rest), and an unreachable server fails in seconds, by name;
- `INCREMENTAL_SPARK_CONF="spark.executor.memory=8g;spark.sql.shuffle.partitions=400"` adds
  any other Spark setting (semicolon-separated `key=value` pairs).
In Dagster, the same keys can be given as `spark_config` of the `pyspark` resource.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any, Mapping

from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from resources.delta_jars import cached_delta_jars, delta_session_conf
from resources.object_store import object_store_in_use, s3a_spark_conf

_LOCK = threading.Lock()
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties").as_uri()

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "incremental-assets",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "true",
    # The default of 200 shuffle partitions is tuned for clusters; locally it only adds tasks.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    # Delta rebuilds a table's state from its log in 50 shuffle partitions by default, made for
    # large logs on clusters: locally each read of a small table paid seconds for it.
    "spark.databricks.delta.snapshotPartitions": "8",
    # Whole-stage code for ~70-column rows exceeds the JVM's 8000-byte JIT limit and would
    # run interpreted; above this limit Spark uses per-operator code instead (wide steps
    # such as base_events ran about 30% faster with it in the benchmark).
    "spark.sql.codegen.hugeMethodLimit": "8000",
    "spark.driver.memory": "6g",
    # Spark keeps the classes it compiled for generated code in a cache of 100 entries by
    # default; an hourly run produces about 350 distinct ones, so each hour compiled nearly all
    # of them again (about 320 compilations, a third of the driver's CPU). With 1000 entries
    # a warm hour compiles only what its new literals change (about 30).
    "spark.sql.codegen.cache.maxEntries": "1000",
    # Every broadcast join builds a hashed relation of at least one memory page, and a run does
    # many small ones; with Spark's default page (up to 64 MB) a long-lived driver filled its
    # heap with them until tasks could no longer get memory. Small pages keep that in check.
    "spark.buffer.pageSize": "2m",
    "spark.ui.showConsoleProgress": "false",
    # PySpark records the Python call site of every Column and DataFrame call for its error
    # messages: four extra Py4J round trips per call, about 7,000 per hourly run. Errors
    # still carry the Python traceback.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Reads hand Spark the exact Parquet files of a Delta snapshot. From 33 paths on, Spark lists
    # them in a Spark job (one task per file), many times slower on a local disk than listing
    # them on the driver (a 30-day look-back opens 720 hourly files). On an object store, where
    # each listing is a remote call, set Spark's default (32) back with INCREMENTAL_SPARK_CONF.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    # Delta's VACUUM lists a table's folders in this many tasks whatever their number (Spark's
    # default is 10,000): twice 10,000 empty tasks made a local vacuum of one small table take
    # minutes. A cluster sets its own with INCREMENTAL_SPARK_CONF.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    # Delta-rs writes INT64 microsecond timestamps; keep Spark's Parquet output the same.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG4J_CONFIG}",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}


def _parse_conf_list(text: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(
                f"INCREMENTAL_SPARK_CONF: expected 'key=value' pairs separated by ';', got {item!r}"
            )
        key, value = item.split("=", 1)
        conf[key.strip()] = value.strip()
    return conf


# Spark Connect: the client sets only runtime SQL settings of its own session; master,
# memory, JVM options and other static settings belong to the server (where it starts).
_CONNECT_CLIENT_PREFIX = "spark.sql."
# Settings Spark Connect rejects from a client: PySpark's Arrow fallback (Connect's Arrow path
# has none) and a static setting, fixed when the server starts (connect_server_command in
# deploy/stack.py starts it with LOCAL_DEFAULTS).
_NOT_FOR_CONNECT = {"spark.sql.execution.arrow.pyspark.fallback.enabled", "spark.sql.codegen.cache.maxEntries"}
CONNECT_DEFAULT_PORT = 15002
CONNECT_REACH_TIMEOUT_SECONDS = 10.0


class SparkConnectError(RuntimeError):
    """A Spark Connect setting or server this process cannot use; the message says why."""


def spark_config_from_env(overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The Spark settings this process uses: local defaults, then environment, then overrides."""
    remote = os.environ.get("INCREMENTAL_SPARK_REMOTE") or os.environ.get("SPARK_REMOTE")
    master = os.environ.get("INCREMENTAL_SPARK_MASTER")
    given = _parse_conf_list(os.environ.get("INCREMENTAL_SPARK_CONF", ""))
    given.update({k: str(v) for k, v in (overrides or {}).items()})
    remote = given.pop("spark.remote", None) or remote
    if remote:
        return connect_client_config(remote, given, master)
    conf = dict(LOCAL_DEFAULTS)
    if master:
        conf["spark.master"] = master
    # Native Delta (the delta-spark engine, Delta reads of any source) whenever `make setup`
    # cached its jars; a `spark.jars` given as well adds to them.
    jars: list[str] = []
    delta_jars = cached_delta_jars()
    if delta_jars:
        conf.update(delta_session_conf(delta_jars))
        jars += delta_jars
    # S3A (a 690 MB SDK bundle) only for a warehouse or source on an object store.
    if object_store_in_use():
        s3a = s3a_spark_conf()
        jars += s3a.pop("spark.jars").split(",")
        conf.update(s3a)
    if given.get("spark.jars"):
        jars += given.pop("spark.jars").split(",")
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(given)
    return conf


def connect_client_config(remote: str, given: Mapping[str, str], master: str | None = None) -> dict[str, str]:
    """The settings a Spark Connect client sends: the SQL defaults and the SQL settings given.
    A setting the server owns is refused by name rather than dropped with a warning, since the
    run would otherwise go on without it."""
    if master:
        raise SparkConnectError(
            f"both INCREMENTAL_SPARK_MASTER={master} and Spark Connect ({remote}) are set: the Connect "
            "server owns the master; unset one of them")
    server_owned = sorted(k for k in given if not k.startswith(_CONNECT_CLIENT_PREFIX) or k in _NOT_FOR_CONNECT)
    if server_owned:
        raise SparkConnectError(
            f"Spark Connect ({remote}): {', '.join(server_owned)} cannot be set by a Connect client; "
            "the server owns it. Set it where the Connect server starts "
            "(start-connect-server.sh --conf key=value), or leave it out of INCREMENTAL_SPARK_CONF")
    conf = {k: v for k, v in LOCAL_DEFAULTS.items()
            if k.startswith(_CONNECT_CLIENT_PREFIX) and k not in _NOT_FOR_CONNECT}
    conf.update(given)
    conf["spark.remote"] = remote
    return conf


def connect_address(remote: str) -> tuple[str, int]:
    """Host and port of a Spark Connect URL: sc://host[:port][/;param=value...]."""
    if not remote.startswith("sc://"):
        raise SparkConnectError(f"Spark Connect URL {remote!r} must start with sc:// (e.g. sc://host:15002)")
    authority = remote[len("sc://"):].split("/", 1)[0]
    host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if not host:
        raise SparkConnectError(f"Spark Connect URL {remote!r} names no host")
    try:
        return host, int(port) if port else CONNECT_DEFAULT_PORT
    except ValueError:
        raise SparkConnectError(f"Spark Connect URL {remote!r}: port {port!r} is not a number") from None


def require_connect_server(remote: str, timeout: float = CONNECT_REACH_TIMEOUT_SECONDS) -> None:
    """Fail fast when the server does not answer: PySpark's client would retry for minutes."""
    host, port = connect_address(remote)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise SparkConnectError(
            f"Spark Connect server {remote} is not reachable at {host}:{port} ({error.strerror or error}): "
            "start it (for example $SPARK_HOME/sbin/start-connect-server.sh) or fix SPARK_REMOTE") from None


def get_spark(overrides: Mapping[str, Any] | None = None):
    """Return this process's Spark session, creating it on first use.

    Settings given after the session exists are applied only where Spark allows it
    at runtime (SQL settings); a second session is never started.
    """
    # PySpark turns collected timestamps into naive datetimes in the *process* time zone;
    # UTC everywhere makes those values mean the same instants the tables hold.
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()
    with _LOCK:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        conf = spark_config_from_env(overrides)
        remote = conf.get("spark.remote")
        if remote:
            require_connect_server(remote)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except ImportError as error:  # PySpark's Connect client needs grpc packages
            raise SparkConnectError(
                f"Spark Connect ({remote}) needs PySpark's Connect client packages: "
                f"pip install '.[deploy]' (or 'pyspark[connect]'); {error}") from error
        if not remote:
            session.sparkContext.setLogLevel(os.environ.get("INCREMENTAL_SPARK_LOG_LEVEL", "ERROR"))
        return session


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy resource with this project's defaults.

    The session starts on first use (steps that never touch Spark start no JVM) and is
    shared by every step and IO manager in the process.
    """

    def _init_session(self) -> None:  # dagster-pyspark's hook, called by .spark_session
        if self._spark_session is None:
            self._spark_session = get_spark(self.spark_config)


def broadcasts_allowed(spark) -> bool:
    """False when the session has broadcast joins turned off (`spark.sql.autoBroadcastJoinThreshold`
    negative, as Spark's error advises when a broadcast runs out of memory): then no join asks
    for one either."""
    return not spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10MB").strip().startswith("-")


def as_utc(value):
    """A datetime collected from Spark (naive, UTC) as a timezone-aware UTC datetime."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)

