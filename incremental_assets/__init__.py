"""Incremental Snowplow-style event modeling: a Dagster code location on Spark + Delta Lake."""
