"""The gates `make test` holds the code to: ruff's checks and the layer contracts of
pyproject.toml (docs/ARCHITECTURE.md, "Layers"). Each runs the tool as a user would."""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = run(str(BIN / "ruff"), "check", "incremental_assets", "resources", "tests", "bench", "deploy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_layer_contracts_are_kept():
    done = run(str(BIN / "lint-imports"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in done.stdout


def test_dagster_dg_loads_the_definitions(tmp_path):
    """`dg check defs`, the check Dagster's docs lead with, on the project as it is laid out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INCREMENTAL_")}
    env["DAGSTER_HOME"] = str(tmp_path)
    done = subprocess.run([str(BIN / "dg"), "check", "defs"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All definitions loaded successfully" in done.stdout + done.stderr
