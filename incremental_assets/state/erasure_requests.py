"""The erasure requests table: which ids were erased, when, and when the erasure completed.

Append-only, written with delta-rs (a few rows). One row per (request, id) and state:
REQUESTED when `forget` records it, COMPLETED once no table holds the id (with what it removed). An id is kept only
as its SHA-256 (`transforms.erasure.id_digest`). Every hourly run reads the erased ids of
every request, whatever its state: an erasure is for good, a rebuild included.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from incremental_assets.names import ERASURE_REQUESTS
from incremental_assets.settings import Settings
from incremental_assets.transforms.erasure import ErasedIds
from resources.tables import append_arrow, read_delta_arrow

REQUESTED, COMPLETED = "REQUESTED", "COMPLETED"
REQUESTS_SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("id_column", pa.string()),
    ("id_sha256", pa.string()),
    ("state", pa.string()),
    ("recorded_at", pa.timestamp("us", tz="UTC")),
    ("rows_found", pa.int64()),  # COMPLETED: rows the erasure removed from the warehouse's tables
    ("load_hours", pa.int64()),  # COMPLETED: processed load hours it ran again
    ("detail", pa.string()),  # COMPLETED: rows per table, in words; the operator's note
])


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    id_column: str
    id_sha256: str
    state: str
    recorded_at: datetime
    rows_found: int | None
    load_hours: int | None
    detail: str


def request_records(settings: Settings) -> list[RequestRecord]:
    """Every record, oldest first (none while nothing was ever erased)."""
    table = read_delta_arrow(settings.table_path(ERASURE_REQUESTS))
    if table is None:
        return []
    return sorted((RequestRecord(**row) for row in table.to_pylist()), key=lambda r: r.recorded_at)


def erased_ids(settings: Settings) -> ErasedIds:
    """The ids of every erasure ever requested."""
    return ErasedIds.of((r.id_column, r.id_sha256) for r in request_records(settings))


def append_records(settings: Settings, records: list[RequestRecord]) -> None:
    rows = [{name: getattr(r, name) for name in REQUESTS_SCHEMA.names} for r in records]
    append_arrow(settings.table_path(ERASURE_REQUESTS), pa.Table.from_pylist(rows, schema=REQUESTS_SCHEMA))


def open_requests(records: list[RequestRecord]) -> list[RequestRecord]:
    """The REQUESTED records no COMPLETED record of the same request and id follows."""
    completed = {(r.request_id, r.id_column, r.id_sha256) for r in records if r.state == COMPLETED}
    return [r for r in records if r.state == REQUESTED and (r.request_id, r.id_column, r.id_sha256) not in completed]
