"""Small helpers the test files share."""

from datetime import datetime, timezone


def utc(*parts: int) -> datetime:
    """A UTC datetime: utc(2026, 1, 5, 3) is 2026-01-05 03:00 UTC."""
    return datetime(*parts, tzinfo=timezone.utc)
