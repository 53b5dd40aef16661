"""A snapshot of what the code location defines: assets (partitions, backfill policy, group,
parents, freshness, owners), asset checks, jobs, sensors and schedules. A change to any of them
shows here as a diff of `definitions_snapshot.json`, to be read and kept on purpose:

    UPDATE_DEFINITIONS_SNAPSHOT=1 .venv/bin/python -m pytest tests/unit/test_definitions_snapshot.py

The rules digest (each asset's code version) is left out: it changes with every setting."""

from __future__ import annotations

import json
import os
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("definitions_snapshot.json")


def _partitions(partitions_def) -> str | None:
    if partitions_def is None:
        return None
    described = type(partitions_def).__name__
    start = getattr(partitions_def, "start", None)
    return f"{described} from {start.isoformat()}" if start is not None else described


def definitions_snapshot() -> dict:
    from incremental_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "materializable": node.is_materializable,
            "partitions": _partitions(node.partitions_def),
            "backfill_policy": str(node.backfill_policy) if node.backfill_policy else None,
            "group": node.group_name,
            "parents": sorted(parent.to_user_string() for parent in node.parent_keys),
            "freshness_policy": node.freshness_policy is not None,
            "owners": list(node.owners),
        }
    checks = sorted(f"{check.asset_key.to_user_string()}:{check.name}" for check in graph.asset_check_keys)
    jobs = {job.name: {"partitions": _partitions(job.partitions_def), "tags": dict(sorted(job.tags.items())),
                       "ops": {name: node.definition.pool for name, node in sorted(job.graph.node_dict.items())}}
            for job in defs.resolve_all_job_defs() if not job.name.startswith("__")}
    sensors = {sensor.name: {"kind": type(sensor).__name__, "interval_seconds": sensor.minimum_interval_seconds,
                             "default_status": sensor.default_status.value,
                             "jobs": sorted(target.job_name for target in sensor.targets)}
               for sensor in defs.sensors}
    schedules = {schedule.name: {"cron": schedule.cron_schedule, "job": schedule.job_name,
                                 "default_status": schedule.default_status.value}
                 for schedule in defs.schedules}
    return {"assets": assets, "asset_checks": checks, "jobs": jobs, "sensors": sensors, "schedules": schedules}


def test_the_definitions_are_the_snapshot():
    current = json.dumps(definitions_snapshot(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_DEFINITIONS_SNAPSHOT"):
        SNAPSHOT.write_text(current)
    assert SNAPSHOT.exists(), f"no snapshot at {SNAPSHOT}: run with UPDATE_DEFINITIONS_SNAPSHOT=1 once"
    assert current == SNAPSHOT.read_text(), (
        "the definitions differ from tests/unit/definitions_snapshot.json: if the change is meant, "
        "run with UPDATE_DEFINITIONS_SNAPSHOT=1 and commit the new snapshot")
