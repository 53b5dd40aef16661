"""The deployment tests need what `make test-deployment` installs: dagster-postgres (pip) and
the PostgreSQL server binaries (initdb, pg_ctl: from Debian's packages where they are missing)."""

import importlib.util
import shutil

import pytest


# trylast: sees the items that remain after `-m` and `-k` deselected theirs, so that
# `make test-clocks` (`-m clock` over every folder) does not need what only these tests use.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    missing = [what for what, ok in (
        ("the Python package dagster-postgres (`make test-deployment` installs it)",
         importlib.util.find_spec("dagster_postgres") is not None),
        ("PostgreSQL's initdb and pg_ctl on PATH", bool(shutil.which("initdb") and shutil.which("pg_ctl"))),
    ) if not ok]
    # Never a silent skip: `make test-deployment` installs both; anything else is an error.
    if missing and any("tests/deployment/" in str(item.fspath) for item in items):
        raise pytest.UsageError("the deployment tests need " + " and ".join(missing)
                                + ": run them with `make test-deployment`, which installs them")
