"""The processing manifest store: claims, races, failures, operator actions. No Spark."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import subprocess
import sys
import threading
import types

import pytest

from incremental_assets.planning.processing_manifest import ItemStatus, State
from resources.manifest import ItemFailLockedError, ItemLockedError, ManifestError, ManifestStore, abandoned_lock_check

ITEMS = ["base_events/2026-01-05-00:00", "base_events/2026-01-05-01:00"]


def never_finished(_lock):
    return None


@pytest.fixture
def store(tmp_path):
    return ManifestStore(str(tmp_path / "processing_manifest"))


def test_claim_then_process_makes_items_ready(store):
    store.claim(ITEMS, application="base_events", run_id="r1", run_finished=never_finished)
    assert {s.status for s in store.states().values()} == {ItemStatus.LOCKED}
    store.close(ITEMS, run_id="r1", state=State.PROCESSED, application="base_events", payload={"rows": 3})
    assert {s.status for s in store.states().values()} == {ItemStatus.READY}
    store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished)


def test_a_second_run_is_refused_with_the_lock_holder_named_and_writes_nothing(store):
    store.claim(ITEMS[:1], application="base_events", run_id="r1", run_finished=never_finished)
    before = len(store.records())
    with pytest.raises(ItemLockedError, match="locked by run r1"):
        store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished)
    assert len(store.records()) == before  # all or none: ITEMS[1] was not claimed either


TURN = "hourly_step/turn"


def test_a_turn_is_held_by_one_run_at_a_time_and_released_by_a_failure_too(store):
    # Steps over different hours take turns through one item, so two never
    # run at once; a failed step fail-locks its own items, never the turn.
    other_hour = "base_events/2026-01-05-02:00"
    store.claim([*ITEMS, TURN], application="hourly", run_id="r1", run_finished=never_finished)
    with pytest.raises(ItemLockedError, match=f"item {TURN} is locked by run r1") as refused:
        store.claim([other_hour, TURN], application="hourly", run_id="r2", run_finished=never_finished)
    assert refused.value.item == TURN
    assert store.states([other_hour]) == {}  # all or none: r2 claimed nothing

    store.close(ITEMS, run_id="r1", state=State.FAILED, application="hourly", payload={"reason": "boom"},
                released=[TURN])
    states = store.states()
    assert {states[i].status for i in ITEMS} == {ItemStatus.FAIL_LOCKED}
    assert states[TURN].status is ItemStatus.READY
    store.claim([other_hour, TURN], application="hourly", run_id="r2", run_finished=never_finished)
    store.close([other_hour], run_id="r2", state=State.PROCESSED, application="hourly", released=[TURN])
    assert store.states()[TURN].status is ItemStatus.READY


def test_failure_fail_locks_until_an_operator_resolves(store):
    store.claim(ITEMS, application="base_events", run_id="r1", run_finished=never_finished)
    store.close(ITEMS, run_id="r1", state=State.FAILED, application="base_events", payload={"reason": "boom"})
    with pytest.raises(ItemFailLockedError, match="boom.*manifest resolve"):
        store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished)
    for item in ITEMS:
        store.resolve([item], note="fixed the source")
    store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished)


def test_a_retry_takes_back_its_own_failed_items_but_not_another_runs(store):
    store.claim(ITEMS, application="base_events", run_id="r1", run_finished=never_finished)
    store.close(ITEMS, run_id="r1", state=State.FAILED, application="base_events", payload={"reason": "conflict"})
    # A run that is not a retry of r1 stays refused.
    with pytest.raises(ItemFailLockedError, match="conflict"):
        store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished, retry_of={"r0"})
    # Dagster's retry of r1 (a new run id, tagged with r1 as parent or root) re-claims them.
    store.claim(ITEMS, application="base_events", run_id="r1-retry", run_finished=never_finished, retry_of={"r1"})
    history = [r.state for r in store.records([ITEMS[0]])]
    assert history == [State.PROCESSING, State.FAILED, State.RESOLVED, State.PROCESSING]
    assert {s.open_lock.run_id for s in store.states().values()} == {"r1-retry"}


def test_auto_resolve_failures_releases_failed_items(store):
    store.claim(ITEMS, application="base_events", run_id="r1", run_finished=never_finished)
    store.close(ITEMS, run_id="r1", state=State.FAILED, application="base_events")
    store.claim(ITEMS, application="base_events", run_id="r2", run_finished=never_finished,
                auto_resolve_failures=True)
    assert {s.status for s in store.states().values()} == {ItemStatus.LOCKED}


def test_an_abandoned_lock_is_released_without_an_operator(store):
    store.claim(ITEMS, application="base_events", run_id="crashed", run_finished=never_finished)
    store.claim(ITEMS, application="base_events", run_id="r2",
                run_finished=lambda lock: f"run {lock.run_id} finished with status FAILURE")
    history = [r.state for r in store.records([ITEMS[0]])]
    assert history == [State.PROCESSING, State.FAILED, State.RESOLVED, State.PROCESSING]
    assert "abandoned" in store.records([ITEMS[0]])[1].payload["reason"]


def test_a_lock_whose_process_is_gone_counts_as_abandoned(store):
    import socket

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    store.claim(ITEMS[:1], application="base_events", run_id="killed", run_finished=never_finished,
                payload={"host": socket.gethostname(), "pid": int(dead)})
    check = abandoned_lock_check(instance=None, max_lock_age_hours=6)
    lock = store.states()[ITEMS[0]].open_lock
    assert "is gone" in check(lock)
    alive = dataclasses.replace(lock, payload={"host": socket.gethostname(), "pid": os.getpid()})
    assert check(alive) is None


class _RunsOf:
    """A Dagster instance as the lock check sees it: every run finished with `status`."""

    def __init__(self, status: str):
        self.status = status

    def get_run_by_id(self, run_id):
        return types.SimpleNamespace(is_finished=True, status=types.SimpleNamespace(value=self.status))


def test_a_lock_whose_writer_lives_is_held_though_monitoring_canceled_its_run(store):
    """Run monitoring cancels a run past its maximum runtime; a process that executes the run
    in itself (the CLI) goes on writing. Its locks hold while it lives, and go once it is gone."""
    import socket

    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.claim(ITEMS[:1], application="base_events", run_id="long-cli-run", run_finished=never_finished,
                    payload={"host": socket.gethostname(), "pid": writer.pid})
        lock = store.states()[ITEMS[0]].open_lock
        check = abandoned_lock_check(instance=_RunsOf("CANCELED"), max_lock_age_hours=6)
        assert check(lock) is None
        with pytest.raises(ItemLockedError):
            store.claim(ITEMS[:1], application="base_events", run_id="next", run_finished=check)
    finally:
        writer.kill()
        writer.wait()
    assert "finished with status CANCELED" in check(lock)
    # This process's own runs are over when they return: their status decides.
    own = dataclasses.replace(lock, payload={"host": socket.gethostname(), "pid": os.getpid()})
    assert "finished with status CANCELED" in check(own)


def test_skip_is_final(store):
    store.skip([ITEMS[0]], note="bad data, never load")
    with pytest.raises(ManifestError, match="skipped"):
        store.claim(ITEMS[:1], application="base_events", run_id="r1", run_finished=never_finished)


def test_resolve_on_a_healthy_item_is_refused(store):
    store.claim(ITEMS[:1], application="base_events", run_id="r1", run_finished=never_finished)
    store.close(ITEMS[:1], run_id="r1", state=State.PROCESSED, application="base_events")
    with pytest.raises(ManifestError, match="READY, not failed"):
        store.resolve([ITEMS[0]])


def _claim_in_process(path, run_id, barrier, results):
    store = ManifestStore(path)
    barrier.wait()
    try:
        store.claim(ITEMS, application="base_events", run_id=run_id, run_finished=never_finished)
        results.put((run_id, "won"))
    except ItemLockedError as exc:
        results.put((run_id, str(exc)))


def test_two_processes_racing_for_the_same_items_exactly_one_wins(tmp_path):
    path = str(tmp_path / "processing_manifest")
    ManifestStore(path).skip(["other/item"])  # the table exists: both racers append
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_process, args=(path, f"run{i}", barrier, results)) for i in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = dict(results.get(timeout=5) for _ in procs)
    winners = [r for r, o in outcomes.items() if o == "won"]
    assert len(winners) == 1, outcomes
    loser = next(r for r in outcomes if r not in winners)
    assert f"locked by run {winners[0]}" in outcomes[loser]
    states = ManifestStore(path).states(ITEMS)
    assert {s.open_lock.run_id for s in states.values()} == set(winners)


def test_many_threads_claiming_disjoint_items_all_succeed(store):
    errors = []

    def claim(i):
        try:
            store.claim([f"base_events/2026-01-06-{i:02d}:00"], application="base_events", run_id=f"r{i}",
                        run_finished=never_finished)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(store.states()) == 8


def test_a_run_of_thirty_thousand_items_claims_and_closes(store):
    # A 300-day backfill claims and closes 7,200 hours of four assets in one run. Selecting
    # them with a delta-rs IN predicate overflowed its native stack: the process died of a
    # segfault at the close.
    items = [f"{asset}/{hour:05d}" for asset in ("base_events", "filtered_events", "lifecycle", "quarantine")
             for hour in range(7_500)]
    store.claim(items, application="hourly_assets", run_id="r1", run_finished=never_finished)
    store.close(items, run_id="r1", state=State.PROCESSED, application="hourly_assets")

    states = store.states(items[:3] + ["other/1"])
    assert sorted(states) == items[:3]
    assert {state.status for state in store.states(items).values()} == {ItemStatus.READY}


def test_the_cost_models_samples_come_from_the_last_runs_alone_and_equal_those_of_every_record(store):
    from incremental_assets.state.progress import COST_SAMPLES, hourly_step_samples, recent_step_samples

    # More hourly steps than the cost model looks at, every fifth one failing, and other
    # assets' records between them (a daily run's, last of all).
    for n in range(2 * COST_SAMPLES + 5):
        items = [f"base_events/2026-01-{5 + n // 24:02d}-{n % 24:02d}:00",
                 f"filtered_events/2026-01-05-{n % 24:02d}:00"]
        items = items[:1] if n % 7 else items
        store.claim(items, application="hourly", run_id=f"r{n}", run_finished=never_finished)
        failed = n % 5 == 4
        store.close(items, run_id=f"r{n}", state=State.FAILED if failed else State.PROCESSED, application="hourly",
                    payload={"reason": "boom"} if failed else {"source_rows": 100 + n})
    store.claim(["daily_aggregates/2026-01-05"], application="daily", run_id="daily", run_finished=never_finished)

    # The last three runs: r42 and r43 closed their hour, r44 failed (no span).
    last = store.spans_of_last_runs("base_events", 3)
    records = {(r.run_id, r.state): r for r in store.records() if r.item_id.startswith("base_events/")}
    assert [(s.run_id, s.items_closed, s.last_close_payload) for s in last] == [
        (f"r{n}", 1, {"source_rows": 100 + n}) for n in (2 * COST_SAMPLES + 2, 2 * COST_SAMPLES + 3)]
    assert [(s.first_claim, s.last_close) for s in last] == [
        (records[s.run_id, State.PROCESSING].recorded_at, records[s.run_id, State.PROCESSED].recorded_at)
        for s in last]
    assert store.spans_of_last_runs("attributes", 3) == []

    samples = recent_step_samples(store)
    assert len(samples) == COST_SAMPLES
    assert samples == hourly_step_samples(store.records())
    assert [s.rows for s in samples][-1] == 100 + 2 * COST_SAMPLES + 3  # the last run (r44) failed
