"""What a process that only plans or reads small tables loads: the table package's cheap face
and the CLI's `limits` path start without pandas (the engines and staging bring it, through
pyarrow.dataset). Each check runs in a new interpreter, as such a process starts."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def modules_loaded_by(*modules: str) -> set[str]:
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("modules", [
    ("resources.tables",),
    ("incremental_assets.cli", "incremental_assets.operator.operations", "incremental_assets.settings"),
])
def test_a_planning_process_starts_without_pandas(modules):
    loaded = modules_loaded_by(*modules)
    assert "pandas" not in loaded
    assert "pyarrow.dataset" not in loaded


def test_the_engines_are_imported_from_their_own_modules():
    loaded = modules_loaded_by("resources.tables")
    assert not {"resources.tables.stores", "resources.tables.delta_rs", "resources.tables.delta_spark",
                "resources.tables.staging"} & loaded
