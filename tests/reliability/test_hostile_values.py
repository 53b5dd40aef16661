"""Values with quotes, `OR 1=1`, `;`, `../` or newlines never change which rows a predicate
selects or where anything is written: values are bound or escaped, names and paths checked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from incremental_assets.planning.processing_manifest import ItemStatus, State
from incremental_assets.settings import Settings, SettingsError
from resources.manifest import ManifestStore
from tests.delta_reads import read_table

HOSTILE = [
    "web' OR '1'='1",
    "x'); DELETE FROM events; --",
    'web" OR "1"="1',
    "a; DROP TABLE base_events",
    "../../escape",
    "a/b",
    "..",
    "line\nbreak",
    "100%",
]
BAD_NAMES = ["../escape", "a/b", "x' OR 1=1", "t;drop", "name\n", "", "..", "base_events "]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_table_and_column_names_that_are_not_plain_identifiers_are_refused(name, spark, tmp_path):
    from resources.tables.delta_rs import DeltaRsTableStore

    tables = DeltaRsTableStore(spark, str(tmp_path))
    with pytest.raises(ValueError, match="plain identifier"):
        tables.path(name)
    with pytest.raises(SettingsError, match="plain identifier"):
        Settings(warehouse=str(tmp_path)).table_path(name)
    with pytest.raises(ValueError, match="plain identifier"):
        tables.read_range("base_events", name, None, None)
    assert list(tmp_path.iterdir()) == []


def hostile_rows(spark):
    """One row per hostile value (in app_id and event_name), plus plain ones."""
    from incremental_assets.sources.schema import conform_to_atomic

    values = ["web", "page_view", *HOSTILE]
    rows = [(f"e{i}", value, value, f"u{i}", f"s{i}", "2026-01-05 10:00:00", "2026-01-05 10:30:00")
            for i, value in enumerate(values)]
    df = spark.createDataFrame(rows, "event_id string, app_id string, event_name string, domain_userid string, "
                                     "domain_sessionid string, derived_tstamp string, load_tstamp string")
    return conform_to_atomic(df)


@pytest.mark.spark
def test_app_id_and_event_name_filters_match_values_exactly(spark):
    from incremental_assets.transforms.base_events import validate
    from incremental_assets.transforms.filtered_events import filtered_events

    source = hostile_rows(spark)
    start = datetime(2026, 1, 5, 10, tzinfo=timezone.utc)

    def base(app_ids):
        return validate(source, days_late_allowed=3, allow_null_dvce_tstamps=True, app_ids=app_ids).valid

    # One query per case: a value that escaped its quotes would select "web" or every row.
    assert sorted(r.app_id for r in base(tuple(HOSTILE)).collect()) == sorted(HOSTILE)
    assert [r.app_id for r in base(("web",)).collect()] == ["web"]
    assert base(("nothing' OR '1'='1",)).count() == 0

    events = base(()).cache()
    sessions = spark.createDataFrame([], "domain_sessionid string, start_tstamp timestamp, "
                                         "domain_userid string, user_id string")

    def names(event_names):
        return [r.event_name for r in filtered_events(events, sessions, event_names=event_names,
                                                      start_date=start - timedelta(days=4),
                                                      max_session_days=3).collect()]

    assert sorted(names(tuple(HOSTILE))) == sorted(HOSTILE)
    assert names(("page_view",)) == ["page_view"]
    assert names(("page_view' OR '1'='1",)) == []
    events.unpersist()


@pytest.mark.spark
def test_deletes_by_value_match_values_exactly(spark, tmp_path):
    from resources.tables.delta_rs import DeltaRsTableStore

    tables = DeltaRsTableStore(spark, str(tmp_path))
    values = ["web", *HOSTILE]
    tables.append("apps", spark.createDataFrame([(v,) for v in values], "app_id string"))
    assert tables.delete_where_in("apps", "app_id", ["nothing' OR '1'='1", "x') OR TRUE --"]).rows_deleted == 0
    assert tables.delete_where_in("apps", "app_id", [HOSTILE[0], HOSTILE[1]]).rows_deleted == 2
    left = read_table(tables.path("apps")).column("app_id").to_pylist()
    assert sorted(left) == sorted(set(values) - {HOSTILE[0], HOSTILE[1]})


@pytest.mark.spark
def test_partition_values_and_odd_warehouse_paths_keep_files_inside_the_table(spark, tmp_path):
    from resources.tables.delta_rs import DeltaRsTableStore

    root = tmp_path / "ware house ' OR 1=1; --"
    tables = DeltaRsTableStore(spark, str(root))
    values = ["web", *HOSTILE]
    df = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "app_id string, n int")
    tables.append("by_app", df, partition_by=["app_id"])
    table_dir = Path(tables.path("by_app")).resolve()
    files = [p.resolve() for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(table_dir in p.parents for p in files), [str(p) for p in files]
    assert sorted(read_table(table_dir).column("app_id").to_pylist()) == sorted(values)
    assert sorted(r.app_id for r in tables.read("by_app").collect()) == sorted(values)


def test_manifest_items_with_hostile_keys_are_kept_verbatim_and_touch_no_other_item(tmp_path):
    store = ManifestStore(str(tmp_path / "processing_manifest"))
    plain = "base_events/2026-01-05-00:00"
    store.claim([plain], application="base_events", run_id="r1", run_finished=lambda lock: None)
    hostile = [f"base_events/2026-01-05-00:00{value}" for value in HOSTILE] + [f"{v}/all" for v in HOSTILE]
    store.claim(hostile, application="base_events", run_id="r2", run_finished=lambda lock: None)
    store.close(hostile, run_id="r2", state=State.PROCESSED, application="base_events")

    states = store.states()
    assert set(states) == {plain, *hostile}
    assert states[plain].status is ItemStatus.LOCKED and states[plain].open_lock.run_id == "r1"
    assert all(states[item].status is ItemStatus.READY for item in hostile)
    assert [r.item_id for r in store.records([hostile[0]])] == [hostile[0], hostile[0]]
    assert [p.name for p in tmp_path.iterdir()] == ["processing_manifest"]


def test_the_cli_reads_and_acts_on_exactly_the_item_named(tmp_path, monkeypatch, capsys):
    from incremental_assets import cli

    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path))
    store = ManifestStore(str(tmp_path / "processing_manifest"))
    plain, hostile = "base_events/2026-01-05-00:00", "base_events/2026-01-05-00:00' OR '1'='1"
    for item in (plain, hostile):
        store.claim([item], application="base_events", run_id="r1", run_finished=lambda lock: None)
        store.close([item], run_id="r1", state=State.FAILED, application="base_events", payload={"reason": "boom"})

    assert cli.main(["manifest", "resolve", hostile, "--note", "'; DROP TABLE x; --"]) == 0
    assert store.states()[hostile].status is ItemStatus.READY
    assert store.states()[plain].status is ItemStatus.FAIL_LOCKED
    capsys.readouterr()
    assert cli.main(["manifest", "show", "base_events/2026-01-05-00:00' OR 'x'='x"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "has no records" in err


@pytest.mark.spark
def test_a_partition_range_with_a_hostile_key_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from incremental_assets.definitions import defs
    from incremental_assets.names import RANGE_END_TAG, RANGE_START_TAG

    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    job = defs.resolve_job_def("hourly_job")
    tags = {RANGE_START_TAG: "2026-01-05-00:00' OR '1'='1", RANGE_END_TAG: "2026-01-05-01:00"}
    try:
        result = job.execute_in_process(instance=DagsterInstance.ephemeral(), tags=tags, raise_on_error=False)
        assert not result.success
    except Exception as exc:  # noqa: BLE001 - Dagster may refuse the key before the run starts
        assert "OR '1'='1" in str(exc)
    assert not (tmp_path / "warehouse").exists()
