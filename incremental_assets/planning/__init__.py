"""The incremental rules as pure functions (no Spark, no Dagster, no I/O).

Used by the product: `reconcile` (which load hours run; its closed hours come from `cursors`,
a cursor-based sync's cursor), `late_days` (which event days are rebuilt, which late rows wait),
`run_limits` (the run states and their limits text: `RunState`, `RunLimits`),
`processing_manifest` (the manifest's record rules), `windows` (ISO 8601 durations of the grace
and abstinent periods), `hours` (hour and day keys, floors, ranges), `attribute_declarations`
(declared attributes parsed from YAML text, validated and versioned).

Kept apart as the brief's planning library, not called by the product since reconciliation
replaced the look-back (each is tested, so it can be picked up again):
- `watermarks` (unit and time watermarks, as in LinkedIn's watermarks): `reconcile` applies grace and abstinent
  periods per hour;
- `run_limits.get_run_limits`, `get_model_run_limits` (per-model limits, as in Snowplow's incremental logic): the hourly
  assets are one step, planned by `reconcile`;
- `windows.resolve_bound`, `windows.partition_windows`, `windows.split_range`: bounds and
  windows of the first sensor;
- `processing_manifest.accepted_records`: the manifest commits by compare-and-swap, so no log
  ever holds conflicting claims to filter out.
"""
