"""The incremental rules as pure functions (no Spark, no Dagster, no I/O).

Used by the product: `reconcile` (which load hours run), `late_days` (which event days are
rebuilt, which late rows wait), `run_limits` (the four run states and their limits text),
`processing_manifest` (the manifest's record rules), `cursors` and `windows` (hour windows,
durations).

Kept as the brief's planning library but not called by the product since reconciliation
replaced the look-back (each is tested, so it can be picked up again):
- `run_limits.get_model_run_limits`: per-model limits; the hourly assets are one step now;
- `watermarks` (unit and time watermarks): `reconcile` applies grace and abstinent periods per hour;
- `windows.resolve_bound`, `windows.partition_windows`: bounds and windows of the first sensor;
- `processing_manifest.accepted_records`: the manifest commits by compare-and-swap, so no log
  ever holds conflicting claims to filter out.
"""
