"""A Spark cluster's configuration: the Delta jars every session loads from the local cache,
S3A's jars and settings for a warehouse or source on an object store, and a warehouse on a
local path refused for a cluster unless declared shared."""

from pathlib import Path

import pytest

from incremental_assets.settings import Settings
from resources import delta_jars
from resources.object_store import ObjectStoreSetupError
from resources.spark import spark_config_from_env
from resources.tables.stores import unshared_warehouse_problem


@pytest.fixture
def jar_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_DELTA_JARS_DIR", str(tmp_path / "cache"))
    for name in ("SPARK_REMOTE", "INCREMENTAL_SPARK_REMOTE", "INCREMENTAL_SPARK_MASTER", "INCREMENTAL_SPARK_CONF",
                 "INCREMENTAL_WAREHOUSE", "INCREMENTAL_SOURCE_PATH", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def _fill(folder: Path, names: list[str], listed: list[str] | None = None) -> None:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    (folder / delta_jars.JAR_LIST).write_text("\n".join(names if listed is None else listed) + "\n")


def test_sessions_load_the_cached_delta_jars_and_extension(jar_cache):
    _fill(delta_jars.coordinate_dir(), ["delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"])
    conf = spark_config_from_env({"spark.jars": "/opt/extra.jar"})
    jars = conf["spark.jars"].split(",")
    assert [Path(j).name for j in jars] == ["delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", "extra.jar"]
    assert conf["spark.sql.extensions"] == delta_jars.DELTA_EXTENSION_CLASS
    assert conf["spark.sql.catalog.spark_catalog"] == delta_jars.DELTA_CATALOG_CLASS


def test_an_incomplete_cache_is_not_used(jar_cache):
    # A jar listed but missing (an interrupted copy): the session starts without Delta jars.
    _fill(delta_jars.coordinate_dir(), ["delta-spark_4.2_2.13-4.4.0.jar"],
          listed=["delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"])
    assert delta_jars.cached_delta_jars() is None
    assert "spark.jars" not in spark_config_from_env()


S3A_JARS = ["hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"]


def test_s3a_is_loaded_only_for_a_warehouse_or_source_on_an_object_store(jar_cache, monkeypatch):
    _fill(delta_jars.coordinate_dir(), ["delta-spark_4.2_2.13-4.4.0.jar"])
    _fill(delta_jars.coordinate_dir(delta_jars.s3a_coordinate()), S3A_JARS)
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", "/data/warehouse")
    conf = spark_config_from_env()
    assert [Path(j).name for j in conf["spark.jars"].split(",")] == ["delta-spark_4.2_2.13-4.4.0.jar"]
    assert not any(key.startswith("spark.hadoop.fs.s3") for key in conf)

    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", "s3a://lake/events")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    conf = spark_config_from_env({"spark.jars": "/opt/extra.jar"})
    assert [Path(j).name for j in conf["spark.jars"].split(",")] == [
        "delta-spark_4.2_2.13-4.4.0.jar", *S3A_JARS, "extra.jar"]
    # s3:// (the name delta-rs and pyarrow use) and s3a:// both go through S3A.
    assert conf["spark.hadoop.fs.s3.impl"] == conf["spark.hadoop.fs.s3a.impl"] == \
        "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"


def test_an_object_store_without_the_cached_s3a_jars_is_refused_by_name(jar_cache, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", "s3://lake/warehouse")
    with pytest.raises(ObjectStoreSetupError, match=r"hadoop-aws.*make setup"):
        spark_config_from_env()


@pytest.mark.parametrize("given, named", [
    ("s3a://lake/warehouse/", "s3://lake/warehouse"),
    ("s3://lake/warehouse", "s3://lake/warehouse"),
    ("abfss://c@account.dfs.core.windows.net/w", "abfss://c@account.dfs.core.windows.net/w"),
])
def test_a_warehouse_on_an_object_store_has_one_name_for_every_engine(given, named):
    settings = Settings(warehouse=given, source_path=given.rstrip("/") + "_source")
    assert settings.warehouse_root == named
    assert settings.source == named + "_source"
    assert settings.table_path("base_events") == named + "/base_events"


def test_only_jars_spark_does_not_ship_are_kept(tmp_path):
    spark_jars = tmp_path / "spark_jars"
    spark_jars.mkdir()
    for name in ("parquet-hadoop-1.17.0.jar", "jackson-core-2.21.2.jar", "scala-library-2.13.18.jar"):
        (spark_jars / name).write_bytes(b"")
    resolved = ["delta-spark_4.2_2.13-4.4.0.jar", "parquet-hadoop-1.16.0.jar", "jackson-core-2.13.5.jar",
                "scala-library-2.13.17.jar", "delta-storage-4.4.0.jar", "zstd-jni-1.5.7-3.jar"]
    assert delta_jars.jars_spark_lacks(resolved, spark_jars) == [
        "delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", "zstd-jni-1.5.7-3.jar"]


def test_the_coordinate_follows_the_installed_packages():
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert delta_jars.delta_coordinate().startswith(f"io.delta:delta-spark_{spark_minor}_2.13:")


@pytest.mark.parametrize("master, root, shared, refused", [
    ("local[2]", "/data/warehouse", False, False),
    ("spark://h:7077", "s3a://bucket/warehouse", False, False),
    ("spark://h:7077", "/data/warehouse", True, False),
    (None, "/data/warehouse", False, False),  # Spark Connect: the server's master
    ("spark://h:7077", "/data/warehouse", False, True),
    ("yarn", "file:///data/warehouse", False, True),
])
def test_a_local_warehouse_path_needs_to_be_declared_shared_on_a_cluster(master, root, shared, refused):
    problem = unshared_warehouse_problem(master, root, shared)
    assert (problem is not None) == refused
    if refused:
        assert root in problem and master in problem and "INCREMENTAL_WAREHOUSE_SHARED=true" in problem
