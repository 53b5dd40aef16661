"""Declared attributes read context columns as Snowplow's loaders write them to Delta: arrays of
structs, beside the atomic columns, carried through base_events and filtered_events."""

from __future__ import annotations

import pytest
from dagster import DagsterInstance

from incremental_assets.names import ATTRIBUTES_JOB, DAILY_JOB, HOURLY_JOB
from incremental_assets.runner import execute_job
from incremental_assets.sources.schema import conform_to_atomic
from incremental_assets.sources.writer import write_source_table
from tests.delta_reads import read_pandas
from tests.reliability.helpers import use_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEVICE = "contexts_com_acme_device_1"


def test_a_context_column_of_structs_reaches_the_declared_attributes(spark, tmp_path, monkeypatch):
    rows = [("e1", "u1", "s1", "2026-01-05 00:10:00", [("Mac", 8), ("iPad", 4)]),
            ("e2", "u1", "s1", "2026-01-05 00:40:00", [("Linux", 16)]),
            ("e3", "u2", "s2", "2026-01-05 01:10:00", None),
            ("e4", "u2", "s2", "2026-01-05 01:20:00", [(None, 2)])]
    df = spark.createDataFrame(rows, f"event_id string, domain_userid string, domain_sessionid string, "
                                     f"derived_tstamp string, {DEVICE} array<struct<os: string, memory: long>>")
    df = df.withColumn("load_tstamp", df.derived_tstamp)
    write_source_table(conform_to_atomic(df).coalesce(1), str(tmp_path / "lake"))
    declaration = tmp_path / "attributes.yml"
    declaration.write_text("attributes:\n"
                           f"  - {{name: last_os, aggregation: last, property: {DEVICE}.os, default: unknown}}\n"
                           f"  - {{name: second_device, aggregation: last, property: '{DEVICE}[1].os'}}\n"
                           f"  - {{name: most_memory, aggregation: max, type: number, property: {DEVICE}.memory}}\n")
    use_settings(monkeypatch, str(tmp_path / "lake"), tmp_path / "warehouse",
                 INCREMENTAL_ATTRIBUTES_FILE=str(declaration), INCREMENTAL_ATTRIBUTES_AS_OF="2026-01-06")
    instance = DagsterInstance.ephemeral()
    for job, partitions in ((HOURLY_JOB, ("2026-01-05-00:00", "2026-01-05-01:00")),
                            (DAILY_JOB, ("2026-01-05", "2026-01-05")), (ATTRIBUTES_JOB, None)):
        assert execute_job(job, instance=instance, partitions=partitions, echo=print).success, job

    got = read_pandas(str(tmp_path / "warehouse" / "attributes")).set_index("domain_userid")
    # The second entity: e1 has one (iPad), e2 none (null, left out of `last`).
    assert got.loc["u1", ["last_os", "second_device", "most_memory"]].tolist() == ["Linux", "iPad", 16.0]
    assert got.loc["u2", ["last_os", "second_device", "most_memory"]].tolist() == ["unknown", None, 2.0]
