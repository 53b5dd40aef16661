"""The deployment files load with the loaders Dagster and Dagster+ use on them, so a key in the
wrong place fails here rather than at deploy time."""
import tomllib
from pathlib import Path

import yaml
from dagster._core.instance.config import dagster_instance_config
from dagster._core.workspace.config_schema import process_workspace_config
from dagster_cloud_cli.config.models import load_dagster_cloud_yaml

REPO = Path(__file__).resolve().parents[2]
MODULE = "incremental_assets.definitions"
LOCATION = "incremental_assets"


def test_dagster_cloud_yaml_follows_dagster_plus_schema():
    config = load_dagster_cloud_yaml((REPO / "dagster_cloud.yaml").read_text())

    [location] = config.locations
    assert (location.location_name, location.code_source.module_name, location.attribute) == \
        (LOCATION, MODULE, "defs")


def test_dagster_cloud_yaml_schema_refuses_attribute_inside_code_source():
    # The mistake this file once had: the check above must be able to fail.
    wrong = {"locations": [{"location_name": LOCATION,
                            "code_source": {"module_name": MODULE, "attribute": "defs"}}]}
    try:
        load_dagster_cloud_yaml(yaml.safe_dump(wrong))
    except ValueError as error:
        assert "attribute" in str(error)
    else:
        raise AssertionError("attribute inside code_source was accepted")


def test_workspace_yaml_follows_dagster_schema_and_names_the_same_location():
    config = yaml.safe_load((REPO / "workspace.yaml").read_text())
    result = process_workspace_config(config)

    assert result.success, result.errors
    [entry] = result.value["load_from"]
    module = entry["python_module"]
    assert (module["module_name"], module["attribute"], module["location_name"]) == (MODULE, "defs", LOCATION)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["dagster"]
    assert (pyproject["module_name"], pyproject["code_location_name"]) == (MODULE, LOCATION)


def test_production_instance_yaml_follows_dagster_schema():
    config, custom_class = dagster_instance_config(str(REPO / "deploy"))

    assert custom_class is None
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["storage"]["custom"]["module"] == "resources.postgres_storage"
    # A sensor ticking every minute is not kept forever.
    assert config["retention"]["sensor"]["purge_after_days"] == {"skipped": 7, "success": 30, "failure": 90,
                                                                  "started": 30}


def test_every_writer_of_the_warehouse_takes_the_hourly_pool():
    """The hourly step and table maintenance (compaction, vacuum) queue for one pool: the
    production instance limits it to 1, so a vacuum never runs beside the hourly write."""
    from incremental_assets.definitions import defs
    from incremental_assets.names import HOURLY_JOB, HOURLY_POOL, MAINTENANCE_JOB

    def pool(job: str, node: str):
        return defs.resolve_job_def(job).graph.node_dict[node].definition.pool

    assert pool(HOURLY_JOB, "hourly_assets") == pool(MAINTENANCE_JOB, "maintain_tables") == HOURLY_POOL
