"""The deployment tests need what `make test-deployment` installs: dagster-postgres (pip) and
the PostgreSQL server binaries (initdb, pg_ctl: on every machine of this project, see README)."""

import importlib.util
import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    missing = [what for what, ok in (
        ("the Python package dagster-postgres (`make test-deployment` installs it)",
         importlib.util.find_spec("dagster_postgres") is not None),
        ("PostgreSQL's initdb and pg_ctl on PATH", bool(shutil.which("initdb") and shutil.which("pg_ctl"))),
    ) if not ok]
    if missing:
        skip = pytest.mark.skip(reason="deployment test needs " + " and ".join(missing))
        for item in items:
            if "tests/deployment/" in str(item.fspath):
                item.add_marker(skip)
