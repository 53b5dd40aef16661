"""A step's transaction (`StepTransaction`): it claims the step's items, writes only in the
declared order, closes them PROCESSED before its markers, and records them FAILED when the step
raises before its close. The manifest and the table store are recorders here: what is asserted
is the order of the calls the transaction makes."""
from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from incremental_assets.planning.processing_manifest import State
from resources.manifest_io_manager import StepDeclaration, StepTransaction
from resources.tables import WriteResult

STEP = StepDeclaration(name="example", assets=("a", "b"), turn="example/turn",
                       writes=(("queue", "a"), ("a", "a"), ("b", "b"), ("queue", "b")),
                       markers=(("ledger", "b"),))


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args[0] if args else None, kwargs.get("state")))
            return WriteResult(rows_written=1, version=1) if name not in ("claim", "close") else []
        return call


def transaction():
    window = SimpleNamespace(start=datetime(2026, 1, 5, tzinfo=timezone.utc),
                             end=datetime(2026, 1, 5, 2, tzinfo=timezone.utc))
    context = SimpleNamespace(run_id="r1", partition_keys=["2026-01-05-00:00", "2026-01-05-01:00"],
                              has_partition_key_range=True, has_partition_key=False, partition_time_window=window,
                              instance=None, run=SimpleNamespace(tags={}), log=SimpleNamespace(info=print))
    manifest, tables = Recorder(), Recorder()
    warehouse = SimpleNamespace(manifest=manifest, tables=tables,
                                settings=SimpleNamespace(max_lock_age_hours=6, auto_resolve_failures=False))
    return StepTransaction(context, warehouse, STEP), manifest, tables


def test_the_writes_go_in_the_declared_order_between_the_claim_and_the_close_then_the_markers():
    step, manifest, tables = transaction()
    with step:
        step.append("queue", "rows")
        step.replace("a", "rows", rows=[])
        step.replace_keys("b", "rows", key="k", keys="keys")  # the second "queue" is optional
        step.close({"note": "done"})
        step.merge("ledger", "rows", keys=["hour"])
    assert [c[0] for c in manifest.calls] == ["claim", "close"]
    assert manifest.calls[1][2] is State.PROCESSED
    assert [(c[0], c[1]) for c in tables.calls] == [("append", "queue"), ("replace", "a"), ("replace_keys", "b"),
                                                    ("merge", "ledger")]
    assert set(step.written["a"]) == {"queue", "a"} and set(step.written["b"]) == {"b", "ledger"}
    claimed = manifest.calls[0][1]
    assert claimed == ["a/2026-01-05-00:00", "a/2026-01-05-01:00", "b/2026-01-05-00:00", "b/2026-01-05-01:00",
                       "example/turn"]


def test_a_write_out_of_the_declared_order_fails_the_step_before_it_writes():
    step, manifest, tables = transaction()
    with pytest.raises(RuntimeError, match=r"writes a out of its declared order"):
        with step:
            step.replace("b", "rows", rows=[])
            step.replace("a", "rows", rows=[])
    assert [(c[0], c[1]) for c in tables.calls] == [("replace", "b")]
    assert [c[0] for c in manifest.calls] == ["claim", "close"] and manifest.calls[1][2] is State.FAILED


def test_a_marker_before_the_close_is_refused_and_a_step_left_open_fails():
    step, manifest, _ = transaction()
    with pytest.raises(RuntimeError, match=r"ledger out of its declared order .*before its close"):
        with step:
            step.merge("ledger", "rows", keys=["hour"])
    assert manifest.calls[-1][2] is State.FAILED
    step, manifest, _ = transaction()
    with pytest.raises(RuntimeError, match="ended without closing its transaction"):
        with step:
            step.append("queue", "rows")
    assert manifest.calls[-1][2] is State.FAILED


def test_a_failure_after_the_close_leaves_the_items_processed():
    step, manifest, _ = transaction()
    with pytest.raises(ValueError):
        with step:
            step.close({})
            raise ValueError("the marker's rows could not be built")
    assert [c[2] for c in manifest.calls if c[0] == "close"] == [State.PROCESSED]
