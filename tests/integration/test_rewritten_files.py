"""The delta-rs store cuts the files a predicate overwrite writes at `rewritten_file_bytes`, so
that replacing a few recent rows rewrites the files holding them, not the whole table."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import functions as F

from resources.tables import RowRange
from resources.tables.stores import table_store

START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
ROWS = 24_000


def minutes(spark, first: int, count: int, *, tag: str = "old"):
    """`count` rows a minute apart from minute `first`, ten to a session `s<minute // 10>`,
    in time order, each carrying 224 characters that do not compress."""
    key = F.concat(F.lit(tag), F.col("id").cast("string"))
    return (spark.range(first, first + count, numPartitions=1)
            .select(F.timestamp_seconds(F.lit(int(START.timestamp())) + F.col("id") * 60).alias("ts"),
                    F.concat(F.lit("s"), (F.col("id") / 10).cast("long")).alias("s"),
                    F.col("id").alias("n"), F.lit(tag).alias("tag"),
                    F.concat(F.sha2(key, 512), F.sha2(key, 384)).alias("pad")))


def at_minute(minute: int) -> dt.datetime:
    return START + dt.timedelta(minutes=minute)


def data_files(path: str) -> dict[str, int]:
    """path -> size of the table's files."""
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()))


def test_replacing_recent_sessions_rewrites_only_the_files_holding_them(spark, tmp_path):
    store = table_store(spark, str(tmp_path / "warehouse"), engine="delta-rs")
    store.rewritten_file_bytes = 256 * 1024
    store.replace_range("t", minutes(spark, 0, ROWS), column="ts", start=START, end=at_minute(ROWS))
    path = store.path("t")
    (whole,) = data_files(path).values()  # one file of about 5.6 MB
    assert whole > 10 * store.rewritten_file_bytes

    def replace_last_session(session: int, tag: str):
        """Session `session`'s rows again (tagged), and one new minute after the others."""
        new = minutes(spark, session * 10, 10, tag=tag).unionByName(minutes(spark, ROWS + session, 1, tag=tag))
        store.replace("t", new, rows=[RowRange("ts", at_minute(ROWS + session), at_minute(ROWS + session + 1)),
                                      RowRange("ts", at_minute(session * 10), None, key="s", values=(f"s{session}",))])

    # The first replace rewrites the one file, cut into files of about the target size.
    replace_last_session(ROWS // 10 - 1, "first")
    after_first = data_files(path)
    assert len(after_first) > 8
    assert max(after_first.values()) < 3 * store.rewritten_file_bytes
    # The next one, of another recent session, rewrites only the file(s) holding its rows.
    replace_last_session(ROWS // 10 - 3, "second")
    after_second = data_files(path)
    removed = set(after_first) - set(after_second)
    assert 1 <= len(removed) <= 2, (len(removed), len(after_first))

    # And the rows are what the replaces say: every minute once, the replaced sessions' new rows.
    table = store.read("t").groupBy("tag").count().collect()
    assert {r.tag: r["count"] for r in table} == {"old": ROWS - 20, "first": 11, "second": 11}
    assert store.read("t").select("n").distinct().count() == ROWS + 2
