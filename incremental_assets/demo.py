"""`make demo`: a sample event lake, a backfill, a few incremental hours, a summary.

Runs on the embedded default: local Spark, Delta tables (delta-rs) under
$INCREMENTAL_WAREHOUSE (./warehouse), Dagster instance in $DAGSTER_HOME (./.dagster_home),
so `make ui` afterwards shows every run and materialization of the demo.
"""

import argparse
import json
import os
import sys
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path


def _ensure_lake(lake: Path, *, start: date, days: int, events: int, seed: int) -> None:
    marker = lake.parent / f"{lake.name}.json"
    wanted = {"start": start.isoformat(), "days": days, "events": events, "seed": seed}
    if lake.exists() and marker.exists() and json.loads(marker.read_text()) == wanted:
        print(f"sample lake: reusing {lake} ({events:,} events over {days} days from {start})")
        return
    from incremental_assets.sources.generator import generate_events
    from resources.spark import get_spark

    lake.parent.mkdir(parents=True, exist_ok=True)
    generate_events(get_spark(), events=events, days=days, start=start, out=str(lake), seed=seed,
                    mode="overwrite")
    marker.write_text(json.dumps(wanted))


def _quiet_instance():
    from dagster import DagsterInstance

    from resources.sqlite_storage import local_instance_yaml

    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".dagster_home").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(local_instance_yaml(home))
    return DagsterInstance.get()


def _summary(settings) -> str:
    from deltalake import DeltaTable

    lines = [f"tables in {settings.warehouse_path}:"]
    for table in sorted(p for p in settings.warehouse_path.iterdir() if (p / "_delta_log").is_dir()):
        dt = DeltaTable(str(table))
        rows = sum(int(a) for a in dt.get_add_actions(flatten=True).column("num_records").to_pylist() if a)
        lines.append(f"  {table.name:<30} {rows:>10,} rows  (Delta version {dt.version()})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True)
    parser.add_argument("--start", type=date.fromisoformat, required=True)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--incremental-hours", type=int, default=3)
    args = parser.parse_args(argv)
    began = time.time()

    lake = Path(args.lake).resolve()
    # Partitions start at start_date when the code location loads: set it before importing it.
    # The demo's history ends with its last day, and its attributes are as of that day: the runs
    # record the settings `make ui` shows (it sets the same two).
    os.environ.setdefault("INCREMENTAL_START_DATE", args.start.isoformat())
    last_day = (args.start + timedelta(days=args.days - 1)).isoformat()
    os.environ.setdefault("INCREMENTAL_END_DATE", last_day)
    os.environ.setdefault("INCREMENTAL_ATTRIBUTES_AS_OF", last_day)
    os.environ["INCREMENTAL_SOURCE_PATH"] = str(lake)
    _ensure_lake(lake, start=args.start, days=args.days, events=args.events, seed=args.seed)

    from incremental_assets.operator.operations import describe_limits
    from incremental_assets.runner import backfill, run_until
    from incremental_assets.settings import Settings

    settings = Settings.load()
    instance = _quiet_instance()
    history_end = args.start + timedelta(days=args.days - 2)
    until = datetime.combine(history_end + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
    print(f"\n1. full backfill of loads {args.start} .. {history_end}")
    # The demo's clock is its data's: attributes as of the sample's days, not today.
    report = backfill(args.start, history_end, instance=instance, now=until)
    if not report.success:
        return 1
    for hour in range(1, args.incremental_hours + 1):
        print(f"\n{hour + 1}. incremental run at {until + timedelta(hours=hour):%Y-%m-%d %H:%M} UTC")
        report = run_until(until + timedelta(hours=hour), instance=instance)
        if not report.success:
            return 1
    now = until + timedelta(hours=args.incremental_hours)
    print("\n" + _summary(settings))
    print("\nmanifest state (what the next run would do):")
    print(describe_limits(settings, now + timedelta(hours=1)))
    print(f"\ndemo finished in {time.time() - began:.0f} s. Next: `make ui` to browse the assets, "
          f"runs and metadata (DAGSTER_HOME={os.environ['DAGSTER_HOME']}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
