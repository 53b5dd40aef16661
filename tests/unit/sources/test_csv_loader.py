"""load_csv on Snowplow's own test exports (the peer data) and on broken cells."""

from __future__ import annotations

import csv
from collections import Counter
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from incremental_assets.sources.csv_loader import load_csv, read_snowplow_csv
from incremental_assets.sources.schema import ATOMIC_EVENTS_SCHEMA, conform_to_atomic
from tests.delta_reads import read_table


def web_csv(peer_dir):
    return peer_dir / "snowplow_web" / "snowplow_web_events.csv"


def batch_csv(peer_dir):
    return peer_dir / "snowplow_batch_engine" / "snowplow_batch_engine_events.csv"


def csv_rows(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def web_table(spark, peer_dir, tmp_path_factory) -> pa.Table:
    out = tmp_path_factory.mktemp("web") / "events"
    result = load_csv(spark, [web_csv(peer_dir)], out, load_tstamp_fallback="collector_tstamp")
    assert result["rows"] == 160 and result["version"] == 0
    return read_table(out)


def test_web_export_loads_every_row_typed(web_table, peer_dir):
    source = csv_rows(web_csv(peer_dir))
    assert web_table.num_rows == len(source) == 160
    # Schema columns first, typed; the other export columns after, as they were.
    names = web_table.schema.names
    assert names[: len(ATOMIC_EVENTS_SCHEMA.fields)] == ATOMIC_EVENTS_SCHEMA.fieldNames()
    assert set(names) == set(source[0]) | {"load_date"} | set(ATOMIC_EVENTS_SCHEMA.fieldNames())
    assert web_table.schema.field("collector_tstamp").type == pa.timestamp("us", tz="UTC")
    assert web_table.schema.field("tr_total").type == pa.decimal128(18, 2)
    assert web_table.schema.field("domain_sessionidx").type == pa.int32()

    ids = web_table.column("event_id").to_pylist()
    assert Counter(ids) == Counter(row["event_id"] for row in source)
    assert len(set(ids)) == 157
    assert sorted(i for i, n in Counter(ids).items() if n > 1) == [
        "17e6ae5e-d694-4241-8663-4118e950fc38", "1b4b3b57-3cb7-4df2-a7fd-526afa9e3c76",
        "9e983d4a-e07c-4858-8e97-bdb7feb31241"]

    rows = {(r["event_id"], r["collector_tstamp"]): r for r in web_table.to_pylist()}
    first = source[0]
    loaded = rows[(first["event_id"], datetime(2021, 3, 3, 21, 27, 32, 696000, tzinfo=timezone.utc))]
    assert loaded["app_id"] is None  # empty cell -> null
    assert loaded["domain_sessionidx"] == 1
    # Quoted JSON with embedded commas and quotes survives intact.
    context = "contexts_com_snowplowanalytics_snowplow_ua_parser_context_1_0_0"
    assert loaded[context] == first[context] and '"osFamily":"MacOSX"' in loaded[context]


def test_fallback_fills_the_missing_load_tstamp_from_collector(web_table, peer_dir):
    source = csv_rows(web_csv(peer_dir))
    assert sum(1 for row in source if row["load_tstamp"] == "") == 95
    assert web_table.column("load_tstamp").null_count == 0
    filled = [r for r in web_table.to_pylist() if r["load_tstamp"] == r["collector_tstamp"]]
    assert len(filled) >= 95
    assert all(r["load_date"] == r["load_tstamp"].date() for r in web_table.to_pylist())


def test_without_fallback_the_missing_load_tstamp_stays_null(spark, peer_dir):
    df = conform_to_atomic(read_snowplow_csv(spark, web_csv(peer_dir)))
    assert df.where("load_tstamp is null").count() == 95


def test_batch_engine_export_loaded_together_with_the_web_export(spark, peer_dir, tmp_path):
    # Exports with different column sets (135 and 145 columns) load into one table;
    # columns a file lacks are null.
    out = tmp_path / "both"
    result = load_csv(spark, [web_csv(peer_dir), batch_csv(peer_dir)], out, load_tstamp_fallback="collector_tstamp")
    assert result["rows"] == 160 + 52
    table = read_table(out).to_pandas()

    batch_ids = {row["event_id"] for row in csv_rows(batch_csv(peer_dir))}
    batch = table[table.event_id.isin(batch_ids)]
    assert len(batch) == 52 and batch.event_id.nunique() == 51
    assert (batch.event_id == "event_8392").sum() == 2
    assert set(batch.app_id) == {"basic_test"}
    # The batch file's own columns are kept; the web rows have none of them.
    ecommerce = "contexts_com_snowplowanalytics_snowplow_ecommerce_transaction_1_0_0"
    assert table[~table.event_id.isin(batch_ids)][ecommerce].isna().all()
    assert batch.load_tstamp.notna().all() and str(batch.load_tstamp.dtype) == "datetime64[us, UTC]"


def test_wrong_typed_cells_become_null_and_unknown_fallback_is_refused(spark, peer_dir, tmp_path):
    broken = tmp_path / "broken.csv"
    broken.write_text(
        "event_id,collector_tstamp,load_tstamp,domain_sessionidx,tr_total,note\n"
        'e1,2021-03-01 10:00:00.000,yesterday,first,"1,234.5","say ""hi"", twice"\n'
        "e2,2021-03-01 11:00:00.000,,2,12.50,\n"
    )
    out = tmp_path / "broken"
    assert load_csv(spark, [broken], out, load_tstamp_fallback="collector_tstamp")["rows"] == 2
    rows = {r["event_id"]: r for r in read_table(out).to_pylist()}
    assert rows["e1"]["load_tstamp"] is None  # present but unreadable: null, rejected downstream
    assert rows["e1"]["domain_sessionidx"] is None and rows["e1"]["tr_total"] is None
    assert rows["e1"]["note"] == 'say "hi", twice'
    assert rows["e2"]["load_tstamp"] == datetime(2021, 3, 1, 11, tzinfo=timezone.utc)  # missing: filled
    assert rows["e2"]["tr_total"] == Decimal("12.50")

    with pytest.raises(ValueError, match="'derived_tstmp'"):
        load_csv(spark, [broken], tmp_path / "never", load_tstamp_fallback="derived_tstmp")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_csv(spark, [tmp_path / "missing.csv"], tmp_path / "never")
