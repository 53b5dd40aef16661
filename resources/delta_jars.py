"""The Delta Lake jars (and S3A's) for Spark: resolved from Maven once (`make setup`), loaded
offline after.

Spark's own `spark.jars.packages` resolves jars at every session start and needs Maven then;
runs and tests here must start offline. So `python -m resources.delta_jars` (run by
`make setup`) asks Maven once for the delta-spark artifact matching the installed delta-spark
and pyspark, with its runtime dependencies, and keeps in a cache only the jars Spark does not
ship itself (Spark's own Hadoop, Parquet, Jackson and Scala versions win; two versions of one
library on a classpath fail at random). A session then loads them with `spark.jars`, local
files that the driver also serves to every executor, so a cluster needs no shared disk.

The same goes for `org.apache.hadoop:hadoop-aws` at the Hadoop version pyspark ships, with the
AWS SDK bundle it needs (S3A, Spark's `s3a://` filesystem; about 690 MB, so sessions load it
only when a warehouse or source is on an object store: `resources/object_store.py`).

The cache is `$INCREMENTAL_DELTA_JARS_DIR` or `~/.cache/incremental-assets/delta-jars`, one
folder per coordinate, complete only when its list `jars.txt` exists (written last).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pyspark

DELTA_EXTENSION_CLASS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG_CLASS = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
JAR_LIST = "jars.txt"
_SCALA_BINARY = "2.13"
# A jar's file name less its version: "parquet-hadoop-1.17.0.jar" -> "parquet-hadoop".
_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")


class DeltaJarsError(RuntimeError):
    """The Delta jars could not be resolved; the message says which and what to do."""


def delta_coordinate() -> str:
    """Maven coordinate of the Delta jars matching the installed delta-spark and pyspark
    (the naming delta-spark's own configure_spark_with_delta_pip uses)."""
    try:
        delta_version = version("delta-spark")
    except PackageNotFoundError:
        delta_version = "<delta-spark version>"
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{_SCALA_BINARY}:{delta_version}"


def spark_jars_dir() -> Path:
    """The jars pyspark ships."""
    return Path(pyspark.__file__).parent / "jars"


def hadoop_version() -> str:
    """The Hadoop release pyspark ships (its hadoop-client-api jar's version)."""
    spark_jars = spark_jars_dir()
    for jar in spark_jars.glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise DeltaJarsError(f"no hadoop-client-api jar in {spark_jars}: cannot tell which hadoop-aws matches")


def s3a_coordinate() -> str:
    """Maven coordinate of S3A matching pyspark's Hadoop (two Hadoop releases on one classpath fail)."""
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"


def cache_root() -> Path:
    given = os.environ.get("INCREMENTAL_DELTA_JARS_DIR")
    return Path(given) if given else Path.home() / ".cache" / "incremental-assets" / "delta-jars"


def coordinate_dir(coordinate: str | None = None) -> Path:
    return cache_root() / (coordinate or delta_coordinate()).replace(":", "_")


def cached_delta_jars(coordinate: str | None = None) -> list[str] | None:
    """Paths of the cached jars for the coordinate; None when they were never resolved."""
    folder = coordinate_dir(coordinate)
    listing = folder / JAR_LIST
    if not listing.is_file():
        return None
    names = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
    paths = [folder / name for name in names]
    if not names or not all(p.is_file() for p in paths):
        return None
    return [str(p) for p in paths]


def delta_session_conf(jars: list[str]) -> dict[str, str]:
    """The settings that load native Delta into a Spark session."""
    return {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": DELTA_EXTENSION_CLASS,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG_CLASS,
    }


def _library_name(jar_name: str) -> str:
    return _VERSION_SUFFIX.sub("", jar_name)


def jars_spark_lacks(jar_names: list[str], spark_jars_dir: Path) -> list[str]:
    """The resolved jars whose library Spark does not ship (Spark's own version wins)."""
    shipped = {_library_name(p.name) for p in spark_jars_dir.glob("*.jar")}
    return sorted(name for name in jar_names if _library_name(name) not in shipped)


def _pom(coordinate: str) -> str:
    group, artifact, release = coordinate.split(":")
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.incremental-assets</groupId><artifactId>delta-jars</artifactId><version>1</version>"
        f"<dependencies><dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{release}</version></dependency></dependencies></project>"
    )


def resolve_delta_jars(coordinate: str | None = None) -> list[str]:
    """Resolve the coordinate with Maven into the cache (once) and return the jar paths."""
    coordinate = coordinate or delta_coordinate()
    cached = cached_delta_jars(coordinate)
    if cached:
        return cached
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DeltaJarsError(
            f"Maven ('mvn') is needed once to fetch the jars {coordinate}: install it "
            "(e.g. 'apt-get install maven') and run 'make setup' again")
    target = coordinate_dir(coordinate)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="delta-jars-", dir=target.parent) as work:
        work_dir = Path(work)
        (work_dir / "pom.xml").write_text(_pom(coordinate))
        out = work_dir / "jars"
        done = subprocess.run(
            [mvn, "-q", "-B", "-f", str(work_dir / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
            capture_output=True, text=True)
        if done.returncode != 0:
            detail = (done.stdout + done.stderr).strip().splitlines()[-12:]
            raise DeltaJarsError(
                f"Maven could not resolve {coordinate} (is that release published for this Spark "
                "version?):\n" + "\n".join(detail))
        keep = jars_spark_lacks([p.name for p in out.glob("*.jar")], spark_jars_dir())
        artifact = coordinate.split(":")[1]
        if not any(name.startswith(artifact + "-") for name in keep):
            raise DeltaJarsError(f"Maven resolved {coordinate} but no {artifact} jar came with it")
        staged = work_dir / "staged"
        staged.mkdir()
        for name in keep:
            shutil.copy2(out / name, staged / name)
        (staged / JAR_LIST).write_text("\n".join(keep) + "\n")  # last: marks the folder complete
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return cached_delta_jars(coordinate) or []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m resources.delta_jars",
        description="Fetch the Delta Lake jars matching the installed delta-spark, and S3A's matching "
                    "pyspark's Hadoop, into the local cache.")
    parser.add_argument("--coordinate", help="one Maven coordinate (default: Delta's and S3A's)")
    args = parser.parse_args(argv)
    coordinates = [args.coordinate] if args.coordinate else [delta_coordinate(), s3a_coordinate()]
    for coordinate in coordinates:
        try:
            jars = resolve_delta_jars(coordinate)
        except DeltaJarsError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(f"jars of {coordinate}: {len(jars)} in {coordinate_dir(coordinate)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
