"""Warehouses and sources on an S3-compatible object store.

One URI names a table for every reader and writer: `s3://bucket/path`. delta-rs and pyarrow
take it as it is; Spark reads and writes it through S3A (Hadoop's S3 filesystem), which this
module maps `s3://` (and `s3a://`) to. Where the store is and who may use it come from the
standard AWS environment, read by all three (delta-rs, pyarrow, S3A):
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (or an instance role), `AWS_REGION`, and for an
S3-compatible store other than AWS, `AWS_ENDPOINT_URL` (path-style addressing) with
`AWS_ALLOW_HTTP=true` when it is plain HTTP.

Commits: delta-rs commits with S3's conditional writes (a commit file is created only if no
other writer created it first), so concurrent runs committing to one table on S3 never lose a
commit; the store must support `If-None-Match` on PUT (AWS S3 since 2024, MinIO, R2, moto).
"""

from __future__ import annotations

import os
from typing import Mapping

import pyarrow.fs as pafs

from incremental_assets.settings import canonical_location
from resources.delta_jars import cached_delta_jars, s3a_coordinate

_S3_SCHEMES = ("s3://", "s3a://")
# The settings whose values can name an object store (the warehouse and the source).
_LOCATION_VARIABLES = ("INCREMENTAL_WAREHOUSE", "INCREMENTAL_SOURCE_PATH")


class ObjectStoreSetupError(RuntimeError):
    """An object-store location this process cannot use yet; the message says what to do."""


def is_object_store(uri: str) -> bool:
    return uri.startswith(_S3_SCHEMES)


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a local path or a URI (`s3://`, `s3a://`, `gs://`, ...), and
    the path within it."""
    if "://" in uri and not uri.startswith("file://"):
        return pafs.FileSystem.from_uri(canonical_location(uri))
    return pafs.LocalFileSystem(), uri.removeprefix("file://")


def object_store_in_use(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the warehouse or the source set in the environment lies on an object store."""
    return any(is_object_store(environ.get(name, "")) for name in _LOCATION_VARIABLES)


def s3a_spark_conf(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Spark settings that let a session read and write `s3://` and `s3a://` URIs: the
    cached S3A jars (`make setup`) and S3A's own settings from the AWS environment. Credentials
    stay with S3A's default chain (the same variables, on every host, or an instance role)."""
    jars = cached_delta_jars(s3a_coordinate())
    if not jars:
        raise ObjectStoreSetupError(
            f"the warehouse or source is on an object store, and Spark needs S3A for it ({s3a_coordinate()} "
            "with the AWS SDK bundle): run 'make setup' (or 'python -m resources.delta_jars') once to fetch "
            "it into the local jar cache")
    conf = {
        "spark.jars": ",".join(jars),
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:  # an S3-compatible store: its own address, buckets in the path
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    return conf
