"""The processing manifest's rows and records: a record as a row of the Delta table and back,
and the rows of items whose replay can be skipped (plainly READY), found in Arrow."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from incremental_assets.planning.processing_manifest import Record, State
from resources.manifest_items import split_item_id


def records_from_rows(data: pa.Table) -> list[Record]:
    """Rows as records, in log order."""
    rows = sorted(data.to_pylist(), key=lambda r: (r["seq"], r["seq_index"]))
    return [record_from_row(r) for r in rows]


def plainly_ready(data: pa.Table) -> np.ndarray:
    """Per row of `data` (sorted by item, then in log order): whether its item is plainly READY,
    so that replaying it can be skipped.

    An item is plainly READY when its records are PROCESSING, PROCESSED pairs and nothing else,
    each PROCESSED referring to the PROCESSING just before it, and no record id repeats: its
    replay (`planning.processing_manifest`) takes the lock and closes it, pair after pair, and
    ends READY. Anything else (a NEW, FAILED, RESOLVED or SKIPPED record, an open lock, a broken
    reference) is left to the replay, so this never decides a status the rules would not.
    """
    n = data.num_rows
    if n == 0 or pc.count_distinct(data["record_id"]).as_py() != n:
        return np.zeros(n, dtype=bool)
    item, state, record_id, previous = (data[name].combine_chunks() for name in
                                        ("item_id", "state", "record_id", "previous_record_id"))

    def flags(values) -> np.ndarray:
        return values.fill_null(False).to_numpy(zero_copy_only=False)

    processing = flags(pc.equal(state, State.PROCESSING.name))
    processed = flags(pc.equal(state, State.PROCESSED.name))
    same_item = flags(pc.equal(item.slice(1), item.slice(0, n - 1)))  # row i+1 and row i
    refers_back = flags(pc.equal(previous.slice(1), record_id.slice(0, n - 1)))
    # closes[i]: row i is a PROCESSED record that closes the PROCESSING record just before it.
    closes = np.zeros(n, dtype=bool)
    closes[1:] = processed[1:] & processing[:-1] & same_item & refers_back
    closed = np.append(closes[1:], False)  # row i is a PROCESSING record that the next row closes
    not_plain = pc.unique(item.filter(pa.array(~(closes | (processing & closed)))))
    return ~flags(pc.is_in(item, value_set=not_plain))


def unsettled_rows(data: pa.Table) -> pa.Table:
    """The rows of the items that are not plainly READY."""
    data = data.sort_by([("item_id", "ascending"), ("seq", "ascending"), ("seq_index", "ascending")])
    return data.filter(pa.array(~plainly_ready(data)))


def record_to_row(record: Record, seq: int, index: int, now: datetime) -> dict:
    asset, key = split_item_id(record.item_id)
    return {
        "seq": seq, "seq_index": index, "record_id": record.record_id, "item_id": record.item_id,
        "asset": asset, "partition_key": key, "state": record.state.name,
        "application": record.application, "run_id": record.run_id,
        "previous_record_id": record.previous_record_id,
        "payload": json.dumps(record.payload, default=str, sort_keys=True) if record.payload else None,
        "recorded_at": record.recorded_at or now,
    }


def record_from_row(row: Mapping) -> Record:
    return Record(record_id=row["record_id"], item_id=row["item_id"], state=State[row["state"]],
                  application=row["application"], run_id=row["run_id"],
                  previous_record_id=row["previous_record_id"],
                  payload=json.loads(row["payload"]) if row["payload"] else None,
                  recorded_at=row["recorded_at"])
