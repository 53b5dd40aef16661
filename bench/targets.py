"""The benchmark's targets: which a run's figures meet, and which its size or options leave out."""

from __future__ import annotations

import statistics


def total_bytes(incremental: dict, metric: str = "file_bytes") -> float:
    return statistics.median(sum(s.get(metric, 0) for s in steps.values()) for steps in incremental["steps"])


def plan_estimate_ratio(incremental: dict) -> float | None:
    """The worst ratio (larger over smaller) of a plan's estimate to its hourly runs' seconds;
    None when no estimate was made (reports from before plans, or nothing recorded to fit)."""
    pairs = [(e, s) for e, s in zip(incremental.get("plan_estimates", []), incremental.get("hourly_seconds", []))
             if e is not None and e > 0 and s > 0]
    return max((max(e / s, s / e) for e, s in pairs), default=None)


# Target: an hour on the sparse long history at most this many times one on a short one.
SPARSE_HISTORY_RATIO = 1.1
# Target: the attributes step at most this share of a warm hour, at every length of history.
ATTRIBUTES_SHARE = 0.10
# Target: the warm full rebuild of the full-size run (10M events over 30 days) at most this.
FULL_SIZE_REBUILD_SECONDS = 450


def attributes_share(incremental: dict) -> float | None:
    """The attributes step's share of a warm hour: its median seconds over the hour's median."""
    seconds = [steps["attributes"]["seconds"] for steps in incremental.get("steps", []) if "attributes" in steps]
    return statistics.median(seconds) / incremental["seconds"].median if seconds else None


def targets(results: dict, days: int) -> list[tuple[str, str, bool]]:
    """(target, figure, met) for each target whose figures are measured."""
    rows = []
    incremental = results.get("incremental", {})
    smallest = min(incremental, default=None)
    if smallest is not None and smallest != days and days in incremental:
        time_ratio = incremental[days]["seconds"].median / incremental[smallest]["seconds"].median
        rows.append((f"incremental hour at {days} d vs {smallest} d of history: time within 1.2x",
                     f"{time_ratio:.2f}x", time_ratio <= 1.2))
        for metric, what in (("spark_input_bytes", "bytes Spark read"), ("file_bytes", "Delta file bytes planned")):
            ratio = total_bytes(incremental[days], metric) / max(1, total_bytes(incremental[smallest], metric))
            rows.append((f"incremental hour at {days} d vs {smallest} d of history: {what} within 1.2x",
                         f"{ratio:.2f}x", ratio <= 1.2))
    if days in incremental:
        # The targets: 3 s for an hour of the small benchmark, 6 s at 10M events.
        limit = 3.0 if results.get("source_rows", 0) < 1_000_000 else 6.0
        hour = incremental[days]["seconds"].median
        rows.append((f"warm incremental hour at {days} d of history at most {limit:.0f} s", f"{hour:.1f} s",
                     hour <= limit))
        share = hour / results["full_warm"].median
        rows.append((f"warm incremental hour under 10% of the warm full rebuild ({days} d)",
                     f"{share:.1%}", share < 0.10))
        if (share := attributes_share(incremental[days])) is not None:
            rows.append((f"attributes step at most {ATTRIBUTES_SHARE:.0%} of a warm hour at {days} d of history",
                         f"{share:.1%}", share <= ATTRIBUTES_SHARE))
    if results.get("source_rows", 0) >= 1_000_000:
        rebuild = results["full_warm"].median
        rows.append((f"warm full rebuild at most {FULL_SIZE_REBUILD_SECONDS} s", f"{rebuild:.0f} s",
                     rebuild <= FULL_SIZE_REBUILD_SECONDS))
    if days in incremental and (ratio := plan_estimate_ratio(incremental[days])) is not None:
        rows.append((f"plan's estimate of each new hour's hourly run within 2x of its time ({days} d)",
                     f"{ratio:.2f}x at worst", ratio <= 2))
    if "cold_hour" in results:
        cold = results["cold_hour"].median
        rows.append((f"cold CLI run for one new hour at {days} d at most 20 s", f"{cold:.1f} s", cold <= 20))
    if "cold_hour_connect" in results:
        cold = results["cold_hour_connect"].median
        rows.append((f"cold CLI run for one new hour at {days} d, through a long-lived Spark Connect server, "
                     "at most 20 s", f"{cold:.1f} s", cold <= 20))
    if "duckdb" in results:
        ratio = results["full_warm"].median / results["duckdb"]["seconds"].median
        rows.append(("warm full rebuild within 3x of DuckDB (DuckDB: final tables only)", f"{ratio:.1f}x", ratio <= 3))
    if "same_tables" in results.get("duckdb", {}):
        ratio = results["full_warm"].median / results["duckdb"]["same_tables"]["seconds"].median
        rows.append(("warm full rebuild within 5x of DuckDB producing the same tables", f"{ratio:.1f}x", ratio <= 5))
    if "sensor" in results:
        tick = results["sensor"]["new_hour"].median
        rows.append((f"sensor tick at most 0.3 s at {days} d of history", f"{tick:.2f} s", tick <= 0.3))
    long, short = results.get("long_history"), results.get("short_sparse_history")
    if long is not None:
        if short is not None:  # the same density and hours: only the length of the history differs
            ratio = long["incremental"]["seconds"].median / short["incremental"]["seconds"].median
            rows.append((f"incremental hour at {long['days']} d vs {short['days']} d of the same sparse history: "
                         f"time within {SPARSE_HISTORY_RATIO}x", f"{ratio:.2f}x", ratio <= SPARSE_HISTORY_RATIO))
        elif days in incremental:
            ratio = long["incremental"]["seconds"].median / incremental[days]["seconds"].median
            rows.append((f"incremental hour at {long['days']} d (sparse) vs {days} d of history: time within "
                         f"{SPARSE_HISTORY_RATIO}x", f"{ratio:.2f}x", ratio <= SPARSE_HISTORY_RATIO))
        if (share := attributes_share(long["incremental"])) is not None:
            rows.append((f"attributes step at most {ATTRIBUTES_SHARE:.0%} of a warm hour at {long['days']} d of "
                         "sparse history", f"{share:.1%}", share <= ATTRIBUTES_SHARE))
        tick = long["sensor"]["new_hour"].median
        rows.append((f"sensor tick at most 0.3 s at {long['days']} d of history", f"{tick:.2f} s", tick <= 0.3))
    return rows


def not_measured(results: dict, full_run: dict | None = None) -> list[str]:
    """The targets this run's size or options leave out, each with what measures it (the report
    lists every target, measured or not); with `full_run`, the raw figures of the last full-size
    run, its targets too, named as that run's."""
    missing = []
    if results.get("source_rows", 0) < 1_000_000:
        missing.append(f"the 10M-event figures (warm hour at most 6 s, cold CLI hour at most 20 s, warm full "
                       f"rebuild at most {FULL_SIZE_REBUILD_SECONDS} s): `make bench`")
    if "long_history" not in results:
        missing.append(f"the 300-day sparse history (an hour within {SPARSE_HISTORY_RATIO}x of 10 days at the same "
                       f"density, the attributes step at most {ATTRIBUTES_SHARE:.0%} of it, a sensor tick at most "
                       "0.3 s): `make bench`, or `--long-history-days 300` beside `--small` (its backfill takes "
                       "about 20 minutes on 2 cores)")
    if not missing:
        return []
    lines = ["Not measured by this run:", *[f"- {line}" for line in missing], ""]
    if full_run is not None:
        lines += [f"Every target as the last full-size run measured it (`make bench`, {full_run['source_rows']:,} "
                  f"events over {full_run['args']['days']} days, written {full_run.get('written', '?')}"
                  f"{' at commit ' + full_run['commit'] if full_run.get('commit') else ''}; "
                  "[RESULTS.md](RESULTS.md)):", "", *_targets_table(full_run), ""]
    return lines


def _targets_table(results: dict) -> list[str]:
    return ["| target | figure | met |", "|---|---|---|",
            *[f"| {name} | {figure} | {'yes' if met else '**no**'} |"
              for name, figure, met in targets(results, int(results["args"]["days"]))]]


def targets_section(results: dict, full_run: dict | None = None) -> list[str]:
    """The report's targets, measured and not (also what a run prints when it ends)."""
    return ["## Targets", *_targets_table(results), "", *not_measured(results, full_run)]
