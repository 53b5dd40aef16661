"""`incremental-assets`: the operator's command line.

Settings come from `INCREMENTAL_*` environment variables (a `.env` file in the current directory
applies as it does in the Dagster UI: its values win); `--warehouse` and `--source` are shortcuts
for the two most common ones. Errors print one line and exit 2.

Commands import what they need when they run: importing the code location reads the
settings, and a bad setting must come out as one line from `main`, not as an import error.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date, datetime, timezone
from pathlib import Path

from dotenv import dotenv_values


def _parse_ts(text: str) -> datetime:
    """An ISO 8601 time (naive is UTC), a date, or `now`; argparse names the option in its error."""
    from incremental_assets.settings import SettingsError, parse_utc_datetime

    if text.strip().lower() == "now":
        return datetime.now(timezone.utc)
    try:
        return parse_utc_datetime("time", text)
    except SettingsError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use ISO 8601 (2024-03-02T18:00:00Z), a date (2024-03-02) or 'now'") from None


def _parse_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


class NoInstance(Exception):
    """A command that launches runs was given no Dagster instance to keep them in."""


def _instance(ephemeral: bool, submit: bool = False):
    """The Dagster instance runs are kept in: $DAGSTER_HOME's, the one the UI and the sensors
    read. Without it a run would go to a throwaway instance nobody ever sees, so that takes
    --ephemeral-instance (and --submit, which hands runs to the instance's daemon, refuses it)."""
    from dagster import DagsterInstance

    if ephemeral and submit:
        raise NoInstance("--submit hands the runs to the instance's queue, which a throwaway instance does not "
                         "have: leave out --ephemeral-instance and set DAGSTER_HOME to the deployment's instance")
    if ephemeral:
        return DagsterInstance.ephemeral()
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise NoInstance("DAGSTER_HOME is not set, so these runs would go to a throwaway Dagster instance "
                         "that the UI and the sensors never see: set DAGSTER_HOME to the instance the UI uses "
                         "(make uses ./.dagster_home), or pass --ephemeral-instance to run without keeping them")
    os.makedirs(home, exist_ok=True)
    return DagsterInstance.get()


def _progress_display(settings):
    """What a command that runs jobs shows while they run (`progress_display`): live on a
    terminal, plain lines elsewhere, its estimate from the hourly step's recorded cost."""
    from incremental_assets.planning.estimates import fit_step_cost
    from incremental_assets.progress_display import progress_display
    from incremental_assets.state.progress import recent_step_samples
    from resources.manifest import ManifestStore

    return progress_display(cost=fit_step_cost(recent_step_samples(ManifestStore.of(settings))))


def cmd_generate(args) -> int:
    from incremental_assets.sources.generator import generate_events
    from resources.spark import get_spark

    summary = generate_events(get_spark(), events=args.events, days=args.days, start=args.start,
                              out=args.out, seed=args.seed, mode="overwrite" if args.overwrite else "error")
    print(f"source table written to {args.out}: {summary}")
    return 0


def cmd_load_csv(args) -> int:
    from incremental_assets.sources.csv_loader import load_csv
    from resources.spark import get_spark

    summary = load_csv(get_spark(), args.files, args.out, load_tstamp_fallback=args.load_tstamp_fallback,
                       mode="overwrite" if args.overwrite else "error")
    print(f"source table written to {args.out}: {summary}")
    return 0


def cmd_run(args) -> int:
    from incremental_assets.runner import run_until
    from incremental_assets.settings import Settings

    settings = Settings.load()  # a bad setting stops here, before _instance() creates DAGSTER_HOME
    instance = _instance(args.ephemeral_instance, args.submit)
    with _progress_display(settings) as display:
        report = run_until(args.until, instance=instance, submit=args.submit, echo=display.echo, observer=display)
    print(report.summary())
    return 0 if report.success else 1


def cmd_backfill(args) -> int:
    from incremental_assets.runner import backfill
    from incremental_assets.settings import Settings

    if args.end < args.start:
        raise ValueError(f"--end {args.end} is before --start {args.start}")
    settings = Settings.load()  # a bad setting stops here, before _instance() creates DAGSTER_HOME
    instance = _instance(args.ephemeral_instance, args.submit)
    with _progress_display(settings) as display:
        report = backfill(args.start, args.end, instance=instance, submit=args.submit, echo=display.echo,
                          observer=display)
    print(report.summary())
    return 0 if report.success else 1


def cmd_limits(args) -> int:
    from incremental_assets.operator.operations import describe_limits
    from incremental_assets.settings import Settings

    print(describe_limits(Settings.load(), args.now or datetime.now(timezone.utc)))
    return 0


def cmd_plan(args) -> int:
    from incremental_assets.operator import plans
    from incremental_assets.settings import Settings

    settings = Settings.load()
    now = args.until or datetime.now(timezone.utc)
    plan = plans.make_plan(settings, now, restate=tuple(args.restate) if args.restate else None, asset=args.asset)
    plans.record_plan(settings, plan, datetime.now(timezone.utc))
    print(plans.describe(plan, full=args.full))
    return 0


def cmd_apply(args) -> int:
    from incremental_assets.runner import apply_plan
    from incremental_assets.settings import Settings

    settings = Settings.load()
    instance = _instance(args.ephemeral_instance)
    with _progress_display(settings) as display:
        report = apply_plan(settings, args.plan_id, instance=instance, echo=display.echo, observer=display)
    print(report.summary())
    return 0 if report.success else 1


def cmd_manifest(args) -> int:
    from incremental_assets.operator import operations
    from incremental_assets.settings import Settings

    settings = Settings.load()
    if args.action == "list":
        print(operations.list_items(settings, only_problems=not args.all, asset=args.asset))
    elif args.action == "show":
        print(operations.show_item(settings, args.item))
    elif args.action == "resolve":
        print(operations.resolve_item(settings, args.item, note=args.note))
    elif args.action == "skip":
        print(operations.skip_item(settings, args.item, note=args.note))
    return 0


def cmd_maintain(args) -> int:
    from incremental_assets.operator.maintenance import describe_scope, maintain_tables
    from incremental_assets.settings import Settings
    from resources.spark import get_spark
    from resources.tables.stores import table_store

    settings = Settings.load()
    now = args.now or datetime.now(timezone.utc)
    print(f"maintenance of {settings.warehouse_root}: {describe_scope(settings, now)}")
    tables = table_store(get_spark(), settings.warehouse_root, settings.table_engine, shared=settings.warehouse_shared)
    results = maintain_tables(settings, tables, now, echo=print)
    print(f"done: {sum(r.files_before for r in results)} -> {sum(r.files_after for r in results)} files "
          f"in {len(results)} tables, {sum(r.files_vacuumed for r in results)} deleted from disk")
    return 0


def cmd_forget(args) -> int:
    from incremental_assets.operator import apply, forget, plans
    from incremental_assets.runner import apply_erasure
    from incremental_assets.settings import Settings
    from incremental_assets.sources.reader import require_source
    from resources.spark import get_spark
    from resources.tables.stores import table_store

    ids = forget.erased([("domain_userid", v) for v in args.domain_userid] + [("user_id", v) for v in args.user_id])
    settings = Settings.load()
    require_source(settings.source)
    tables = table_store(get_spark(), settings.warehouse_root, settings.table_engine, shared=settings.warehouse_shared)
    found = forget.find(settings, tables, ids)
    plan = apply.plan_erasure(settings, args.until, tables, ids, found=found)
    plans.record_plan(settings, plan, datetime.now(timezone.utc))
    print(plans.describe(plan, apply_hint=args.dry_run))
    if found.linked_domain_userids:
        print(found.describe().splitlines()[-1])
    if args.dry_run:
        return 0
    instance = _instance(args.ephemeral_instance)
    with _progress_display(settings) as display:
        report = apply_erasure(settings, plan, tables, instance=instance, note=args.note, echo=display.echo,
                               observer=display)
    print(report.summary())
    return 0 if report.success else 1


SUBMIT_HELP = ("submit the hourly runs to the instance ($DAGSTER_HOME) instead of running them here: its queue, "
               "pools and run launcher run them, and its sensors the days and attributes after them")


def _global_options(default) -> argparse.ArgumentParser:
    """--warehouse and --source, taken before or after the command. After it they must not
    reset a value given before it, hence the subcommands' default SUPPRESS."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--warehouse", default=default, help="warehouse directory (INCREMENTAL_WAREHOUSE)")
    options.add_argument("--source", default=default, help="source events table (INCREMENTAL_SOURCE_PATH)")
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="incremental-assets", description=__doc__.splitlines()[0],
                                     parents=[_global_options(None)])
    sub = parser.add_subparsers(dest="command", required=True)
    after = _global_options(argparse.SUPPRESS)
    instance = argparse.ArgumentParser(add_help=False)
    instance.add_argument("--ephemeral-instance", action="store_true",
                          help="keep the runs in a throwaway Dagster instance instead of $DAGSTER_HOME's")

    p = sub.add_parser("generate", parents=[after], help="write a deterministic sample event lake (Delta)")
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--start", type=_parse_date, default=date(2026, 1, 5))
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--overwrite", action="store_true", help="replace an existing table at --out")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("load-csv", parents=[after], help="load Snowplow CSV exports into a source table")
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--load-tstamp-fallback", choices=["collector_tstamp"], default=None,
                   help="fill a missing load_tstamp from this column (older exports lack it)")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_load_csv)

    p = sub.add_parser("run", parents=[after, instance],
                       help="what the hourly sensor would do at time --until, in this process")
    p.add_argument("--until", type=_parse_ts, required=True, help="ISO 8601 (2024-03-02T18:00:00Z), a date, or 'now'")
    p.add_argument("--submit", action="store_true", help=SUBMIT_HELP)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("backfill", parents=[after, instance], help="rebuild loads of [--start, --end] in every asset")
    p.add_argument("--start", type=_parse_date, required=True)
    p.add_argument("--end", type=_parse_date, required=True)
    p.add_argument("--submit", action="store_true", help=SUBMIT_HELP)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("limits", parents=[after], help="the current state and the limits the next run would use")
    p.add_argument("--now", type=_parse_ts, default=None, help="evaluate at this time instead of now")
    p.set_defaults(func=cmd_limits)

    p = sub.add_parser("plan", parents=[after],
                       help="what the next runs (or a restatement) will recompute, with rows, days and cost, "
                            "under an id (an erasure's plan: `forget --dry-run`)")
    p.add_argument("--until", type=_parse_ts, default=None, help="plan what is due at this time (default: now)")
    p.add_argument("--restate", nargs=2, type=_parse_date, metavar=("FIRST", "LAST"), default=None,
                   help="plan a rebuild of the load days FIRST..LAST instead of what is due")
    p.add_argument("--asset", default=None, metavar="ASSET",
                   help="with --restate: the asset it starts from; daily_aggregates rebuilds the event days "
                        "FIRST..LAST alone (then attributes), a load-hour asset the load hours and all after them")
    p.add_argument("--full", action="store_true", help="list every load hour and event day, not only counts")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("apply", parents=[after, instance],
                       help="run a plan made by `plan`, refused if the source, the settings or the work moved since")
    p.add_argument("plan_id")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("maintain", parents=[after], help="compact small files and vacuum every table")
    p.add_argument("--now", type=_parse_ts, default=None, help="what 'recent' is counted from (default: now)")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("forget", parents=[after, instance],
                       help="erase users from every table (and keep them out of every later run)")
    p.add_argument("--domain-userid", action="append", default=[], metavar="ID", help="repeat for several")
    p.add_argument("--user-id", action="append", default=[], metavar="ID", help="repeat for several")
    p.add_argument("--dry-run", action="store_true",
                   help="only plan it: the rows per table, the hours and days it runs again, the cost, under an id "
                        "for `apply`")
    p.add_argument("--until", type=_parse_ts, default=datetime.now(timezone.utc),
                   help="run what is due up to this time (default: now)")
    p.add_argument("--note", default="", help="why (kept in erasure_requests), e.g. a ticket number")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("manifest", parents=[after], help="inspect and act on processing-manifest items")
    p.add_argument("action", choices=["list", "show", "resolve", "skip"])
    p.add_argument("item", nargs="?", help="item id, e.g. base_events/2026-01-05-03:00")
    p.add_argument("--all", action="store_true", help="list: every item, not only locked/failed ones")
    p.add_argument("--asset", default=None, help="list: only this asset's items")
    p.add_argument("--note", default="", help="resolve/skip: why (kept in the manifest)")
    p.set_defaults(func=cmd_manifest)
    return parser


def apply_env_file(directory: Path) -> list[str]:
    """The variables of `directory/.env`, set as `dagster dev` sets them for the UI (the file's
    values win over the environment's); their names."""
    values = {name: value for name, value in dotenv_values(directory / ".env").items() if value is not None}
    os.environ.update(values)
    return sorted(values)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    loaded = apply_env_file(Path.cwd())
    if loaded:
        print(f"incremental-assets: loaded {', '.join(loaded)} from {Path.cwd() / '.env'}", file=sys.stderr)
    if args.warehouse:
        os.environ["INCREMENTAL_WAREHOUSE"] = args.warehouse
    if args.source:
        os.environ["INCREMENTAL_SOURCE_PATH"] = args.source
    if args.command == "manifest" and args.action != "list" and not args.item:
        parser.error(f"manifest {args.action} needs an item id")
    # Spark logs a failed task with its Java stack trace; the CLI reports every failure in one
    # line instead (INCREMENTAL_SPARK_LOG_LEVEL=ERROR brings Spark's log back).
    os.environ.setdefault("INCREMENTAL_SPARK_LOG_LEVEL", "OFF")
    try:
        return args.func(args)
    except Exception as exc:  # noqa: BLE001 - one clear line for the operator, not a trace
        from incremental_assets.settings import SettingsError

        kind = "settings error" if isinstance(exc, SettingsError) else "error"
        print(f"incremental-assets: {kind}: {exc}", file=sys.stderr)
        if os.environ.get("INCREMENTAL_DEBUG"):
            raise
        return 2


if __name__ == "__main__":
    sys.exit(main())
