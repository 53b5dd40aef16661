"""The engines' side-by-side report: ratios of the figures both runs measured, the data files
each rebuild wrote, and whether each rebuild's tables equal DuckDB's."""

from bench.engines import comparison
from bench.measure import Figure


def run(rebuild: list[float], hour: list[float], files: dict[str, int], wrong: str | None = None) -> dict:
    tables = {name: {"rows": {"ours": 5, "duckdb": 5}, "differences": ["a row"] if name == wrong else []}
              for name in ("base_events", "attributes")}
    return {"full_warm": Figure(rebuild), "incremental": {10: {"seconds": Figure(hour)}},
            "files_written": files,
            "duckdb": {"same_tables": {"seconds": Figure([1.0, 1.0, 1.0]), "tables": tables}}}


def test_both_engines_side_by_side_with_ratios_files_and_correctness():
    lines = comparison({
        "delta-rs": run([60.0, 62.0, 70.0], [9.0, 9.5, 10.0], {"base_events": 10, "attributes": 2}),
        "delta-spark": run([90.0, 93.0, 99.0], [19.0, 19.0, 20.0], {"base_events": 30, "attributes": 1},
                           wrong="attributes"),
    })
    text = "\n".join(lines)
    assert "| warm full rebuild | 62.0 s [60.0 .. 70.0] | 93.0 s [90.0 .. 99.0] | 1.50x |" in text
    assert "| warm incremental hour, 10 days of history | 9.5 s [9.0 .. 10.0] | 19.0 s [19.0 .. 20.0] | 2.00x |" in text
    assert "| data files after one rebuild (all tables) | 12 | 31 | 2.58x |" in text
    assert "| base_events | 10 | 30 |" in text
    assert "| tables of the rebuild | all 2 equal to DuckDB's | differ from DuckDB's: attributes | |" in text
