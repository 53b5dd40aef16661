"""Load hours an operator skipped (`manifest skip ITEM` on an hourly item): a tombstone, not a hole.

From the skip on, every run reads the hour's rows as if the source never held them. The next
run processes the hour once more, as empty (`planning.reconcile.skipped_hours_run_again`): that
undoes whatever a failed run wrote of it (copies that suppress later ones, session rows,
filtered rows and their counts), and a rebuild leaves the hour out the same way. Append-only,
written with delta-rs (a few rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

import pyarrow as pa

from incremental_assets.names import SKIPPED_HOURS
from incremental_assets.settings import Settings
from resources.tables import append_arrow, read_delta_arrow

SKIPPED_HOURS_SCHEMA = pa.schema([
    ("load_hour_tstamp", pa.timestamp("us", tz="UTC")),
    ("note", pa.string()),
    ("recorded_at", pa.timestamp("us", tz="UTC")),
])


def skipped_hours(settings: Settings) -> dict[datetime, datetime]:
    """Each skipped load hour and when it was (last) skipped; none while nothing was."""
    table = read_delta_arrow(settings.table_path(SKIPPED_HOURS))
    if table is None:
        return {}
    out: dict[datetime, datetime] = {}
    for row in table.to_pylist():
        hour, at = (row[name].astimezone(timezone.utc) for name in ("load_hour_tstamp", "recorded_at"))
        out[hour] = max(at, out.get(hour, at))
    return out


def record_skips(settings: Settings, hours: Iterable[datetime], *, note: str, now: datetime) -> None:
    rows = [{"load_hour_tstamp": hour, "note": note, "recorded_at": now} for hour in hours]
    append_arrow(settings.table_path(SKIPPED_HOURS), pa.Table.from_pylist(rows, schema=SKIPPED_HOURS_SCHEMA))
