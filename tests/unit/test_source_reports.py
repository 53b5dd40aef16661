"""Which source hours the catalog is told about (planning/source_reports.py)."""

from datetime import datetime, timedelta, timezone

from incremental_assets.planning.source_reports import NO_FILES, hours_to_report

T = datetime(2026, 1, 5, tzinfo=timezone.utc)


def h(n: int) -> datetime:
    return T + timedelta(hours=n)


def report(fingerprints, reported, limit=100):
    return hours_to_report(fingerprints, reported, since=h(0), closed_before=h(5), limit=limit)


def test_closed_hours_not_reported_with_these_files_are_reported_oldest_first():
    fingerprints = {h(3): "c", h(0): "a", h(1): "b", h(5): "open", h(-1): "before the start"}
    assert list(report(fingerprints, {}).items()) == [(h(0), "a"), (h(1), "b"), (h(3), "c")]
    assert report(fingerprints, {h(0): "a", h(1): "b", h(3): "c"}) == {}
    assert report(fingerprints, {h(0): "a", h(1): "old", h(3): "c"}) == {h(1): "b"}


def test_an_hour_whose_files_are_gone_is_reported_empty_once():
    assert report({h(0): "a"}, {h(0): "a", h(2): "b"}) == {h(2): NO_FILES}
    assert report({h(0): "a"}, {h(0): "a", h(2): NO_FILES}) == {}
    assert report({}, {h(-3): "before the start", h(7): "not closed"}) == {}


def test_at_most_limit_hours_a_call_the_oldest_first():
    fingerprints = {h(n): str(n) for n in range(5)}
    assert list(report(fingerprints, {}, limit=2)) == [h(0), h(1)]
    assert list(report(fingerprints, {h(0): "0", h(1): "1"}, limit=2)) == [h(2), h(3)]
