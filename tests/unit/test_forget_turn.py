"""`forget` makes the hours holding the erased ids due again while it holds the hourly turn: a
catch-up run (which replaces its own apps' rows alone) cannot start between the search and the
run-again ledger rows and record those hours as processed with the other apps' rows unerased."""

from datetime import datetime, timezone

from incremental_assets.names import HOUR_LEDGER, HOURLY_TURN
from incremental_assets.operator import forget
from incremental_assets.planning.processing_manifest import ItemStatus
from incremental_assets.planning.reconcile import RUN_AGAIN
from incremental_assets.settings import Settings
from resources.manifest import ManifestStore

NOW = datetime(2026, 1, 8, 12, tzinfo=timezone.utc)
HOUR = datetime(2026, 1, 5, 1, tzinfo=timezone.utc)


class RecordingTables:
    """The table store's merge, recording whether the hourly turn was held when it ran."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.spark = self  # createDataFrame: the rows as they are
        self.merges: list[tuple[str, list, ItemStatus | None]] = []

    def createDataFrame(self, rows, schema):  # noqa: N802 (Spark's name)
        return rows

    def merge(self, name, rows, keys):
        turn = ManifestStore.of(self.settings).states([HOURLY_TURN]).get(HOURLY_TURN)
        self.merges.append((name, rows, turn.status if turn else None))


def test_the_run_again_rows_are_written_while_forget_holds_the_hourly_turn(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path))
    settings = Settings.load()
    tables = RecordingTables(settings)
    monkeypatch.setattr(forget, "find", lambda settings, tables, ids: forget.Found({"base_events": 1}, (HOUR,)))
    forget.request_erasure(settings, tables, forget.erased([("domain_userid", "u1")]), instance=None, now=NOW)
    assert [(name, [row[:2] for row in rows], turn) for name, rows, turn in tables.merges] == [
        (HOUR_LEDGER, [(HOUR, RUN_AGAIN)], ItemStatus.LOCKED)]
    assert ManifestStore.of(settings).states([HOURLY_TURN])[HOURLY_TURN].status is not ItemStatus.LOCKED
