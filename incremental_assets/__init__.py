"""Incremental Snowplow-style event modeling: a Dagster code location on Spark + Delta Lake."""

import warnings

# The project relies on two beta Dagster parameters on purpose (single-run backfill policies
# and allow_nonexistent_upstream_partitions); their warnings would repeat on every load.
try:
    from dagster import BetaWarning

    warnings.filterwarnings("ignore", category=BetaWarning)
except ImportError:  # pragma: no cover - older dagster
    pass
