"""A Spark cluster's configuration: the Delta jars every session loads from the local cache,
and a warehouse on a local path refused for a cluster unless declared shared."""

from pathlib import Path

import pytest

from resources import delta_jars
from resources.spark import spark_config_from_env
from resources.tables import unshared_warehouse_problem


@pytest.fixture
def jar_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_DELTA_JARS_DIR", str(tmp_path / "cache"))
    for name in ("SPARK_REMOTE", "INCREMENTAL_SPARK_REMOTE", "INCREMENTAL_SPARK_MASTER", "INCREMENTAL_SPARK_CONF"):
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
