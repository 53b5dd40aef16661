"""`ManifestStore.unsettled_states`, the views that look for problems (sensor, checks, limits):
it must give every item `states()` gives that is not READY, with the same status and records,
and leave out only items that are READY. Random logs, written as stored rows (bypassing the
append checks, as a manual edit could), compare the two. No Spark."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.processing_manifest import ItemStatus, Record, State
from resources.manifest import _SCHEMA, ManifestStore
from resources.manifest_rows import record_to_row

# What one step appends to an item's log: mostly well-formed pairs, with the shapes that make
# an item anything but plainly READY.
STEPS = ["pair", "pair", "pair", "open", "fail", "resolve", "skip", "new", "bad close",
         "repeated id", "unreferenced close"]
items_logs = st.lists(st.lists(st.sampled_from(STEPS), min_size=0, max_size=6), min_size=1, max_size=6)


def item_records(item: str, steps: list[str]) -> list[Record]:
    records: list[Record] = []

    def add(state: State, previous: str | None = None, record_id: str | None = None) -> Record:
        record = Record(record_id or f"{item}-r{len(records)}", item, state, "pipeline", "run-a", previous)
        records.append(record)
        return record

    for step in steps:
        if step == "pair":
            add(State.PROCESSED, add(State.PROCESSING).record_id)
        elif step == "open":
            add(State.PROCESSING)
        elif step == "fail":
            add(State.FAILED, add(State.PROCESSING).record_id)
        elif step == "resolve":
            failed = [r for r in records if r.state is State.FAILED]
            add(State.RESOLVED, failed[-1].record_id if failed else None)
        elif step == "skip":
            add(State.SKIPPED, records[-1].record_id if records else None)
        elif step == "new":
            add(State.NEW)
        elif step == "bad close":
            add(State.PROCESSING)
            add(State.PROCESSED, "no-such-record")
        elif step == "repeated id" and records:
            add(State.PROCESSING, record_id=records[0].record_id)
            add(State.PROCESSED, records[0].record_id)
        elif step == "unreferenced close":
            add(State.PROCESSED)
    return records


def write_log(path: str, logs: list[list[Record]], seed: int) -> None:
    """The items' records interleaved in a random log order that keeps each item's own order,
    in a few commits."""
    queues = [list(log) for log in logs if log]
    rng, ordered = random.Random(seed), []
    while queues:
        queue = rng.choice(queues)
        ordered.append(queue.pop(0))
        queues = [q for q in queues if q]
    commits = [ordered[i:i + 7] for i in range(0, len(ordered), 7)]
    for seq, records in enumerate(commits):
        rows = [record_to_row(record, seq, index, None) for index, record in enumerate(records)]
        write_deltalake(path, pa.Table.from_pylist(rows, schema=_SCHEMA), mode="append")


@settings(max_examples=60, deadline=None)
@given(items_logs, st.integers(min_value=0, max_value=1000))
def test_unsettled_states_are_states_without_plainly_ready_items(tmp_path_factory, steps_per_item, seed):
    path = str(tmp_path_factory.mktemp("manifest") / "processing_manifest")
    logs = [item_records(f"base_events/item-{n}", steps) for n, steps in enumerate(steps_per_item)]
    write_log(path, logs, seed)
    store = ManifestStore(path)
    every, unsettled = store.states(), store.unsettled_states()

    assert set(unsettled) <= set(every)
    for item, state in every.items():
        if item in unsettled:
            assert unsettled[item] == state
        else:
            assert state.status is ItemStatus.READY, f"{item} is {state.status.name} but was left out"
    ids = [record.record_id for log in logs for record in log]
    if len(ids) == len(set(ids)):  # a repeated record id anywhere sends every item to the replay
        plain = {log[0].item_id for log, steps in zip(logs, steps_per_item) if steps and set(steps) == {"pair"}}
        assert plain.isdisjoint(unsettled), "items of well-formed pairs only must be read without a replay"
    # The same through a snapshot (the sensor's read).
    assert store.snapshot().unsettled_states() == unsettled


def test_an_invalid_item_that_ends_with_a_processed_record_is_still_reported(tmp_path):
    path = str(tmp_path / "processing_manifest")
    broken = item_records("base_events/broken", ["pair", "bad close"])
    write_log(path, [broken, item_records("base_events/fine", ["pair", "pair"])], seed=1)
    unsettled = ManifestStore(path).unsettled_states()
    assert list(unsettled) == ["base_events/broken"]
    assert unsettled["base_events/broken"].status is ItemStatus.INVALID


def test_a_snapshot_refuses_writes_and_keeps_the_version_it_read(tmp_path):
    store = ManifestStore(str(tmp_path / "processing_manifest"))
    store.claim(["base_events/a"], application="base_events", run_id="r1", run_finished=lambda _: None)
    snapshot = store.snapshot()
    assert snapshot.version() == store.version() == 0
    store.close(["base_events/a"], run_id="r1", state=State.PROCESSED, application="base_events")
    assert store.version() == 1 and snapshot.version() == 0
    assert snapshot.unsettled_states()["base_events/a"].status is ItemStatus.LOCKED
    with pytest.raises(TypeError, match="read-only"):
        snapshot.skip(["base_events/b"], note="by the test")
