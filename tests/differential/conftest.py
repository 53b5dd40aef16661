"""Fixtures shared by the differential tests."""
import pytest
from dagster import DagsterInstance


@pytest.fixture(scope="module")
def instance():
    """A throwaway Dagster instance for the runs of one test module."""
    return DagsterInstance.ephemeral()
