"""The processing manifest's rules: locks, failures, resolution, skipping."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.planning.processing_manifest import (
    ItemStatus,
    ManifestError,
    Record,
    State,
    accepted_records,
    check_append,
    group_by_item,
    item_status,
    last_failure,
    open_lock,
)

ITEM = "daily_aggregates/2025-01-01"


class Log:
    """Builds one item's records with fresh ids, in log order."""

    def __init__(self, item_id: str = ITEM):
        self.item_id = item_id
        self.records: list[Record] = []
        self._ids = itertools.count(1)

    def make(self, state: State, run_id: str = "run-a", previous: Record | None = None) -> Record:
        return Record(record_id=f"{self.item_id}#{next(self._ids)}", item_id=self.item_id,
                      state=state, application="pipeline", run_id=run_id,
                      previous_record_id=previous.record_id if previous else None)

    def add(self, state: State, run_id: str = "run-a", previous: Record | None = None) -> Record:
        record = self.make(state, run_id, previous)
        self.records.append(record)
        return record


# -- item_status ---------------------------------------------------------------------------

def test_no_records_or_only_new_is_new():
    log = Log()
    assert item_status([]) is ItemStatus.NEW
    log.add(State.NEW)
    assert item_status(log.records) is ItemStatus.NEW


def test_processing_locks_and_processed_releases():
    log = Log()
    lock = log.add(State.PROCESSING)
    assert item_status(log.records) is ItemStatus.LOCKED
    assert open_lock(log.records) == lock
    log.add(State.PROCESSED, previous=lock)
    assert item_status(log.records) is ItemStatus.READY
    assert open_lock(log.records) is None


def test_failed_fail_locks_until_resolved():
    log = Log()
    lock = log.add(State.PROCESSING)
    failed = log.add(State.FAILED, previous=lock)
    assert item_status(log.records) is ItemStatus.FAIL_LOCKED
    assert open_lock(log.records) is None
    assert last_failure(log.records) == failed
    log.add(State.RESOLVED, run_id="operator", previous=failed)
    assert item_status(log.records) is ItemStatus.READY
    assert last_failure(log.records) == failed  # still reported after it was resolved


def test_ready_item_can_be_processed_by_the_next_application():
    log = Log()
    log.add(State.PROCESSED, previous=log.add(State.PROCESSING))
    second = log.add(State.PROCESSING, run_id="run-b")
    assert item_status(log.records) is ItemStatus.LOCKED
    assert open_lock(log.records) == second
    assert last_failure(log.records) is None


def test_skipped_is_final():
    log = Log()
    log.add(State.NEW)
    log.add(State.SKIPPED, run_id="operator")
    assert item_status(log.records) is ItemStatus.SKIPPED
    log.add(State.PROCESSING)
    assert item_status(log.records) is ItemStatus.INVALID


def test_failed_referring_to_a_processed_record_is_invalid():
    log = Log()
    processed = log.add(State.PROCESSED, previous=log.add(State.PROCESSING))
    log.add(State.FAILED, previous=processed)
    assert item_status(log.records) is ItemStatus.INVALID


@pytest.mark.parametrize("build", [
    lambda log: log.add(State.PROCESSED),  # closes nothing
    lambda log: log.add(State.PROCESSED, previous=log.add(State.NEW)),
    lambda log: (log.add(State.PROCESSING), log.add(State.PROCESSING)),  # two locks
    lambda log: log.add(State.FAILED, previous=log.add(State.PROCESSING)) and log.add(
        State.RESOLVED, previous=log.records[0]),  # RESOLVED refers to the PROCESSING
    lambda log: log.add(State.RESOLVED),  # nothing failed
    lambda log: (log.add(State.PROCESSED, previous=log.add(State.PROCESSING)),
                 log.add(State.NEW)),  # NEW after the item exists
])
def test_records_that_break_the_rules_make_the_item_invalid(build):
    log = Log()
    build(log)
    assert item_status(log.records) is ItemStatus.INVALID


def test_duplicate_record_ids_make_the_item_invalid():
    log = Log()
    lock = log.add(State.PROCESSING)
    log.records.append(lock)
    assert item_status(log.records) is ItemStatus.INVALID


def test_records_of_several_items_are_refused():
    a, b = Log("a"), Log("b")
    records = [a.add(State.NEW), b.add(State.NEW)]
    with pytest.raises(ValueError, match="group_by_item"):
        item_status(records)
    assert group_by_item(records) == {"a": [records[0]], "b": [records[1]]}


def test_open_lock_of_an_invalid_item_raises():
    log = Log()
    log.add(State.PROCESSED)
    with pytest.raises(ManifestError):
        open_lock(log.records)


# -- check_append ----------------------------------------------------------------------------

def test_check_append_refuses_a_second_lock_naming_the_holder():
    log = Log()
    lock = log.add(State.PROCESSING, run_id="run-a")
    expected = rf"item {ITEM} is locked by run run-a \(record {lock.record_id}\)"
    with pytest.raises(ManifestError, match=expected):
        check_append(log.records, log.make(State.PROCESSING, run_id="run-b"))


@pytest.mark.parametrize("state", [State.NEW, State.SKIPPED, State.RESOLVED])
def test_a_locked_item_takes_no_other_records(state):
    log = Log()
    log.add(State.PROCESSING)
    with pytest.raises(ManifestError, match="is locked by run run-a"):
        check_append(log.records, log.make(state, run_id="operator"))


def test_check_append_refuses_processing_on_a_fail_locked_item():
    log = Log()
    log.add(State.FAILED, previous=log.add(State.PROCESSING))
    with pytest.raises(ManifestError, match=rf"item {ITEM} is fail-locked .*; resolve it first"):
        check_append(log.records, log.make(State.PROCESSING, run_id="run-b"))


def test_fail_locked_item_can_be_resolved_or_skipped():
    log = Log()
    failed = log.add(State.FAILED, previous=log.add(State.PROCESSING))
    check_append(log.records, log.make(State.RESOLVED, previous=failed))
    check_append(log.records, log.make(State.SKIPPED))


def test_processing_after_resolution_is_allowed():
    log = Log()
    failed = log.add(State.FAILED, previous=log.add(State.PROCESSING))
    log.add(State.RESOLVED, run_id="operator", previous=failed)
    check_append(log.records, log.make(State.PROCESSING, run_id="run-b"))


def test_check_append_refuses_anything_after_skipped():
    log = Log()
    log.add(State.SKIPPED)
    for state in State:
        with pytest.raises(ManifestError, match=rf"item {ITEM} is skipped"):
            check_append(log.records, log.make(state))


def test_check_append_refuses_a_wrong_reference_naming_both_records():
    log = Log()
    new = log.add(State.NEW)
    lock = log.add(State.PROCESSING)
    with pytest.raises(ManifestError, match=rf"refers to '{new.record_id}', not to the open "
                                            rf"PROCESSING record {lock.record_id}"):
        check_append(log.records, log.make(State.PROCESSED, previous=new))


def test_check_append_refuses_resolving_a_record_other_than_the_failure():
    log = Log()
    lock = log.add(State.PROCESSING)
    failed = log.add(State.FAILED, previous=lock)
    with pytest.raises(ManifestError, match=f"not to the FAILED record {failed.record_id}"):
        check_append(log.records, log.make(State.RESOLVED, previous=lock))


def test_check_append_refuses_closing_when_nothing_is_open():
    log = Log()
    with pytest.raises(ManifestError, match="has no open PROCESSING record"):
        check_append(log.records, log.make(State.PROCESSED))


def test_check_append_refuses_a_record_of_another_item():
    log = Log()
    log.add(State.NEW)
    with pytest.raises(ManifestError, match="is for item other, not for item"):
        check_append(log.records, Log("other").make(State.PROCESSING))


def test_check_append_refuses_a_duplicate_record_id():
    log = Log()
    lock = log.add(State.PROCESSING)
    log.add(State.PROCESSED, previous=lock)
    with pytest.raises(ManifestError, match="already has a record"):
        check_append(log.records, lock)


def test_check_append_on_an_invalid_item_says_so():
    log = Log()
    log.add(State.PROCESSED)
    with pytest.raises(ManifestError, match="is invalid"):
        check_append(log.records, log.make(State.PROCESSING))


def test_the_first_record_may_be_new_processing_or_skipped():
    for state in (State.NEW, State.PROCESSING, State.SKIPPED):
        check_append([], Log().make(state))


# -- records ---------------------------------------------------------------------------------

def test_record_state_may_be_given_by_name():
    record = Record("r1", ITEM, "PROCESSING", "pipeline", "run-a")
    assert record.state is State.PROCESSING


@pytest.mark.parametrize("fields", [
    dict(record_id="r1", item_id=ITEM, state="DONE"),
    dict(record_id="", item_id=ITEM, state=State.NEW),
    dict(record_id="r1", item_id="", state=State.NEW),
])
def test_bad_records_are_refused(fields):
    with pytest.raises(ValueError):
        Record(application="pipeline", run_id="run-a", **fields)


# -- accepted_records: linearising concurrent writers ---------------------------------------

def test_the_first_claim_in_log_order_wins():
    log = Log()
    claim_a = log.make(State.PROCESSING, run_id="run-a")
    claim_b = log.make(State.PROCESSING, run_id="run-b")
    done_b = log.make(State.PROCESSED, run_id="run-b", previous=claim_b)
    done_a = log.make(State.PROCESSED, run_id="run-a", previous=claim_a)
    assert accepted_records([claim_a, claim_b, done_b, done_a]) == [claim_a, done_a]


def test_accepted_records_handles_several_items_in_log_order():
    a, b = Log("a"), Log("b")
    lock_a = a.make(State.PROCESSING)
    lock_b = b.make(State.PROCESSING)
    stray = a.make(State.PROCESSING, run_id="run-b")
    done_a = a.make(State.PROCESSED, previous=lock_a)
    records = [lock_a, lock_b, stray, done_a]
    assert accepted_records(records) == [lock_a, lock_b, done_a]
    grouped = group_by_item(accepted_records(records))
    statuses = {item: item_status(item_records) for item, item_records in grouped.items()}
    assert statuses == {"a": ItemStatus.READY, "b": ItemStatus.LOCKED}


# -- property: never two open locks ------------------------------------------------------------

# Skips are rare (they end an item) and references mostly point at the latest PROCESSING or
# FAILED record or at the latest record a fold keeps, so random logs close locks and resolve
# failures often enough to be interesting.
STATES = [State.NEW] + [State.PROCESSING] * 3 + [State.PROCESSED] * 3 + [State.FAILED] * 2 \
    + [State.RESOLVED] * 2 + [State.SKIPPED]
REFERENCES = ["none", "latest PROCESSING", "latest FAILED", "latest kept", "latest kept",
              "latest kept", "latest record", "any"]
steps = st.lists(
    st.tuples(st.sampled_from(STATES), st.sampled_from(["run-a", "run-b", "operator"]),
              st.sampled_from(REFERENCES), st.integers(min_value=0, max_value=30)),
    min_size=5, max_size=30)


def build_records(plan):
    """Records from (state, run, what to refer to, a random index); ids are unique."""
    records: list[Record] = []
    for index, (state, run_id, reference, any_index) in enumerate(plan):
        candidates = {
            "none": [],
            "latest PROCESSING": [r for r in records if r.state is State.PROCESSING][-1:],
            "latest FAILED": [r for r in records if r.state is State.FAILED][-1:],
            "latest kept": accepted_records(records)[-1:],
            "latest record": records[-1:],
            "any": records[any_index % len(records):][:1] if records else [],
        }[reference]
        previous = candidates[0].record_id if candidates else None
        records.append(Record(f"r{index}", ITEM, state, "pipeline", run_id, previous))
    return records


def open_processing(records):
    closed = {r.previous_record_id for r in records if r.state in (State.PROCESSED, State.FAILED)}
    return [r for r in records if r.state is State.PROCESSING and r.record_id not in closed]


@settings(max_examples=200, deadline=None)
@given(steps)
def test_no_accepted_sequence_has_two_open_locks(plan):
    accepted: list[Record] = []
    for record in build_records(plan):
        try:
            check_append(accepted, record)
        except ManifestError:
            continue
        accepted.append(record)
        still_open = open_processing(accepted)
        assert len(still_open) <= 1
        assert open_lock(accepted) == (still_open[0] if still_open else None)
        assert item_status(accepted) is not ItemStatus.INVALID
    assert accepted_records(build_records(plan)) == accepted


@settings(max_examples=200, deadline=None)
@given(steps)
def test_a_log_is_valid_exactly_when_every_record_was_acceptable(plan):
    records = build_records(plan)
    all_acceptable = accepted_records(records) == records
    assert (item_status(records) is not ItemStatus.INVALID) == all_acceptable
