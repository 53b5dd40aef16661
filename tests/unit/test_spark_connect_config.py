"""Spark Connect settings: what the client sends, what it refuses by name, and a server that
does not answer fails in seconds (PySpark's own client would retry for minutes)."""

import socket
import time

import pytest

from resources.spark import (
    CONNECT_DEFAULT_PORT,
    LOCAL_DEFAULTS,
    SparkConnectError,
    connect_address,
    require_connect_server,
    spark_config_from_env,
)
from resources.tables.staging import StagedRows, StagingNotVisible

REMOTE = "sc://127.0.0.1:15002"


@pytest.fixture
def clean_spark_env(monkeypatch):
    for name in ("SPARK_REMOTE", "INCREMENTAL_SPARK_REMOTE", "INCREMENTAL_SPARK_MASTER", "INCREMENTAL_SPARK_CONF"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_local_mode_keeps_every_default(clean_spark_env):
    clean_spark_env.setenv("INCREMENTAL_SPARK_MASTER", "spark://10.0.0.1:7077")
    conf = spark_config_from_env()
    assert conf["spark.master"] == "spark://10.0.0.1:7077"
    assert conf["spark.buffer.pageSize"] == LOCAL_DEFAULTS["spark.buffer.pageSize"]
    assert "spark.remote" not in conf


def test_a_connect_client_sends_only_sql_settings(clean_spark_env):
    clean_spark_env.setenv("SPARK_REMOTE", REMOTE)
    clean_spark_env.setenv("INCREMENTAL_SPARK_CONF", "spark.sql.shuffle.partitions=400")
    conf = spark_config_from_env()
    assert conf["spark.remote"] == REMOTE
    assert conf["spark.sql.shuffle.partitions"] == "400"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    others = sorted(k for k in conf if k != "spark.remote" and not k.startswith("spark.sql."))
    assert others == []
    # Connect rejects PySpark's Arrow fallback switch and static settings: they are not sent.
    assert "spark.sql.execution.arrow.pyspark.fallback.enabled" not in conf
    assert "spark.sql.codegen.cache.maxEntries" not in conf


def test_the_project_variable_and_a_resource_override_select_connect_too(clean_spark_env):
    clean_spark_env.setenv("INCREMENTAL_SPARK_REMOTE", REMOTE)
    assert spark_config_from_env()["spark.remote"] == REMOTE
    clean_spark_env.delenv("INCREMENTAL_SPARK_REMOTE")
    assert spark_config_from_env({"spark.remote": "sc://other:1"})["spark.remote"] == "sc://other:1"


@pytest.mark.parametrize("setting", ["spark.executor.memory=8g", "spark.master=local[2]",
                                     "spark.sql.execution.arrow.pyspark.fallback.enabled=true",
                                     "spark.sql.codegen.cache.maxEntries=50"])
def test_a_setting_the_server_owns_is_refused_by_name(clean_spark_env, setting):
    clean_spark_env.setenv("SPARK_REMOTE", REMOTE)
    clean_spark_env.setenv("INCREMENTAL_SPARK_CONF", f"spark.sql.shuffle.partitions=4;{setting}")
    with pytest.raises(SparkConnectError, match=setting.split("=")[0].replace(".", r"\.") + " cannot be set"):
        spark_config_from_env()


def test_a_master_and_connect_together_are_refused(clean_spark_env):
    clean_spark_env.setenv("SPARK_REMOTE", REMOTE)
    clean_spark_env.setenv("INCREMENTAL_SPARK_MASTER", "spark://h:7077")
    with pytest.raises(SparkConnectError, match="INCREMENTAL_SPARK_MASTER=spark://h:7077"):
        spark_config_from_env()


@pytest.mark.parametrize("url, address", [
    ("sc://spark.internal:15010", ("spark.internal", 15010)),
    ("sc://spark.internal", ("spark.internal", CONNECT_DEFAULT_PORT)),
    ("sc://10.1.2.3:443/;use_ssl=true;token=abc", ("10.1.2.3", 443)),
])
def test_connect_address(url, address):
    assert connect_address(url) == address


@pytest.mark.parametrize("url, message", [
    ("http://host:15002", "must start with sc://"),
    ("sc://:15002", "names no host"),
    ("sc://host:port", "'port' is not a number"),
])
def test_a_bad_connect_url_is_named(url, message):
    with pytest.raises(SparkConnectError, match=message):
        connect_address(url)


def test_an_unreachable_server_fails_fast_and_names_the_address():
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(SparkConnectError, match=f"sc://127.0.0.1:{port} is not reachable"):
        require_connect_server(f"sc://127.0.0.1:{port}")
    assert time.monotonic() - started < 5


def test_staged_rows_this_process_cannot_see_are_a_clear_error(tmp_path, monkeypatch):
    # A Spark whose driver is another machine: the write succeeds there (5 rows written),
    # nothing appears here.
    from resources.tables import staging

    monkeypatch.setattr(staging, "write_parquet_counted", lambda df, path, partition_by=(): 5)
    with pytest.raises(StagingNotVisible, match="same path"):
        StagedRows(object(), str(tmp_path))
