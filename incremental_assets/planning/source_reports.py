"""Which of the source's load hours the catalog is told about: each closed hour that holds files
is reported once per version of its files (its fingerprint), and an hour once reported whose
files are gone is reported again as empty. Pure: the hourly sensor reads the fingerprints and
what was reported, and turns these hours into Dagster events."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

# The version of an hour that holds no file any more (a fingerprint is a hex digest).
NO_FILES = "no-files"


def hours_to_report(fingerprints: Mapping[datetime, str], reported: Mapping[datetime, str | None], *,
                    since: datetime, closed_before: datetime, limit: int) -> dict[datetime, str]:
    """The load hours in [since, closed_before) whose files differ from what was last reported of
    them (`reported`: hour -> version), each with its version now (its fingerprint, or NO_FILES),
    oldest first and at most `limit` of them: a source of many hours is reported over several
    calls, the oldest first."""
    now = {hour: fingerprint for hour, fingerprint in fingerprints.items() if since <= hour < closed_before}
    gone = {hour: NO_FILES for hour, version in reported.items()
            if since <= hour < closed_before and hour not in now and version != NO_FILES}
    changed = {hour: version for hour, version in {**now, **gone}.items() if reported.get(hour) != version}
    return dict(sorted(changed.items())[:limit])
