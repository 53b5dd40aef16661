"""A catch-up run's manifest items carry its app ids (units): the same load hour's
items for every app stay free when the catch-up of some apps fails."""
import pytest

from incremental_assets.operator.operations import _step_items, skip_item
from incremental_assets.planning.processing_manifest import ManifestError
from resources.manifest_items import item_id, split_item_id, unit_of


def test_a_units_items_name_its_apps_and_split_back():
    item = item_id("base_events", "2026-01-05-03:00", "mobile,shop")
    assert item == "base_events@mobile,shop/2026-01-05-03:00"
    assert unit_of(item) == ("base_events", "2026-01-05-03:00", "mobile,shop")
    assert unit_of("base_events/2026-01-05-03:00") == ("base_events", "2026-01-05-03:00", None)
    assert split_item_id(item) == ("base_events@mobile,shop", "2026-01-05-03:00")


def test_resolving_a_units_item_resolves_its_steps_four_and_skipping_one_is_refused():
    assert _step_items("filtered_events@mobile/2026-01-05-03:00") == [
        "filtered_events@mobile/2026-01-05-03:00", "base_events@mobile/2026-01-05-03:00",
        "sessions_lifecycle_manifest@mobile/2026-01-05-03:00", "quarantined_sessions@mobile/2026-01-05-03:00"]
    with pytest.raises(ManifestError, match="the catch-up of app\\(s\\) mobile for one load hour: resolve it"):
        skip_item(None, "base_events@mobile/2026-01-05-03:00")
