"""A process whose last act is reading small Delta tables into Arrow exits 0, every time.

Reading through deltalake's Python file handler (`DeltaTable.to_pyarrow_table()`) let an Arrow
worker thread release a Python buffer while the interpreter was shutting down: the process
aborted ("terminate called without an active exception", SIGABRT) in 7-34% of runs of this
very pattern, after its work was done. The product reads every small table through
`resources.tables.read_delta_arrow` (delta-rs's own scan), which has no Python file objects.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.reliability.helpers import REPO

# 48 child processes: `make test-long` (and `make soak`), to keep `make test` within 20 minutes.
pytestmark = pytest.mark.long

PROCESSES = 48  # the old reader aborted at least 7% of the time: 48 clean exits rule it out (p < 0.04)
PARALLEL = 4

# What `run --until` does last when it rebuilds no day: a few small Delta tables read into Arrow.
READ_AND_EXIT = """
import sys
from resources.tables import read_delta_arrow
for path in sys.argv[1:]:
    table = read_delta_arrow(path)
    assert table is not None and table.num_rows > 0, path
"""


@pytest.fixture(scope="module")
def small_tables(tmp_path_factory) -> list[str]:
    """Two tables of several small files each, like the manifest and the daily ledger."""
    root = tmp_path_factory.mktemp("small_tables")
    paths = []
    for name in ("manifest_like", "ledger_like"):
        path = str(root / name)
        for commit in range(6):
            write_deltalake(path, pa.table({"item": [f"{name}-{commit}-{i}" for i in range(50)],
                                            "n": list(range(50))}), mode="append")
        paths.append(path)
    return paths


def test_reading_small_tables_then_exiting_never_aborts(small_tables):
    def run(_: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", READ_AND_EXIT, *small_tables], cwd=REPO,
                              capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(run, range(PROCESSES)))
    failed = [(r.returncode, r.stderr[-500:]) for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of {PROCESSES} processes did not exit 0: {failed[:3]}"
