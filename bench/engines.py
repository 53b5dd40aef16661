"""The two Delta engines side by side, from two benchmark runs on the same machine and data.

    python -m bench.engines DELTA_RS_JSON DELTA_SPARK_JSON [--out bench/ENGINES-small.md]

`make bench-small` runs the benchmark once per engine (`--engine delta-rs`, `--engine
delta-spark`) and then this: the warm full rebuild, the warm hour at each history, the cold
hour, the tables each rebuild wrote (and their data files), and whether each engine's rebuild
equals DuckDB's tables, so the faster engine is chosen only among those that are correct.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.report import _headline, _machine, _span, load_results, written_now

BENCH_ENGINES = ("delta-rs", "delta-spark")


def _correct(results: dict) -> str:
    """Whether the run's first rebuild wrote the tables DuckDB wrote from the same source."""
    same = results.get("duckdb", {}).get("same_tables")
    if same is None:
        return "not compared"
    wrong = sorted(table for table, compared in same["tables"].items()
                   if compared["differences"] or compared["rows"]["ours"] != compared["rows"]["duckdb"])
    return f"all {len(same['tables'])} equal to DuckDB's" if not wrong else "differ from DuckDB's: " + ", ".join(wrong)


def comparison(runs: dict[str, dict]) -> list[str]:
    """The markdown lines of the comparison of `runs` (engine -> a run's results)."""
    engines = list(runs)
    lines = [f"| figure | {' | '.join(engines)} | {engines[1]} / {engines[0]} |", "|---|" + "---|" * (len(engines) + 1)]
    headlines = {engine: _headline(results) for engine, results in runs.items()}
    names = [name for name in headlines[engines[0]] if all(name in h for h in headlines.values())
             and not name.startswith("DuckDB")]
    for name in names:
        figures = [headlines[engine][name] for engine in engines]
        ratio = figures[1].median / figures[0].median if figures[0].median else float("nan")
        lines.append(f"| {name} | {' | '.join(_span(f) for f in figures)} | {ratio:.2f}x |")
    only = sorted({name for h in headlines.values() for name in h} - set(names))
    files = {engine: results.get("files_written", {}) for engine, results in runs.items()}
    tables = sorted({table for per_engine in files.values() for table in per_engine})
    if tables:
        totals = [sum(files[engine].values()) for engine in engines]
        lines.append(f"| data files after one rebuild (all tables) | {' | '.join(str(t) for t in totals)} | "
                     f"{totals[1] / totals[0]:.2f}x |" if totals[0] else "| data files | - | - | - |")
    lines.append(f"| tables of the rebuild | {' | '.join(_correct(runs[e]) for e in engines)} | |")
    out = ["", *lines, ""]
    if tables:
        out += ["Data files per table after one warm rebuild:", "",
                f"| table | {' | '.join(engines)} |", "|---|" + "---|" * len(engines)]
        out += [f"| {table} | {' | '.join(str(files[e].get(table, '-')) for e in engines)} |" for table in tables]
        out.append("")
    if only:
        out.append("Measured for one engine only: " + "; ".join(only) + ".")
    return out


def write_comparison(paths: dict[str, Path], out: Path) -> None:
    runs = {engine: load_results(path) for engine, path in paths.items()}
    sizes = {(r.get("args", {}).get("events"), r.get("args", {}).get("days")) for r in runs.values()}
    commits = {r.get("commit") for r in runs.values()}
    lines = [
        "# The Delta engines side by side",
        "",
        f"Written {written_now()} by `python -m bench.engines` from "
        + " and ".join(f"`{p.name}` ({engine})" for engine, p in paths.items())
        + f"; commit {', '.join(sorted(str(c) for c in commits))}. Each figure: median [min .. max].",
        "",
        *_machine(),
    ]
    if len(sizes) > 1:
        lines += ["", f"Warning: the runs measured different data ({sorted(sizes)}); the ratios mean little."]
    lines += comparison(runs)
    out.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs=2, type=Path, help="the runs' raw figures: delta-rs's, then delta-spark's")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "ENGINES-small.md")
    args = parser.parse_args(argv)
    write_comparison(dict(zip(BENCH_ENGINES, args.results)), args.out)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
