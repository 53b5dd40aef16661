"""Attribute declarations: what a file may say, the error that names what it got wrong, and
the version that changes exactly when the values would."""

import pytest

from incremental_assets.planning.attribute_declarations import (
    AttributeDeclarationError,
    PropertyPath,
    declaration,
    declarations,
    parse_declarations,
)
from incremental_assets.planning.default_attributes import DEFAULT_ATTRIBUTES, recorded_versions
from incremental_assets.settings import Settings, SettingsError

LAST_OS = {"name": "last_os", "aggregation": "last",
           "property": "contexts_nl_basjes_yauaa_context_1_0_0.operatingSystemName"}


def test_a_full_declaration_is_read():
    text = """
attributes:
  - name: big_carts_last_7_days
    aggregation: count
    events: [{name: purchase, vendor: com.acme, version: 1-0-0}, page_view]
    criteria: {any: [{property: "contexts_com_acme_cart_1_0_0[1].total", operator: gte, value: 50},
                     {property: geo_country, operator: in, value: [DE, FR]}]}
    period: 7
    description: carts of 50 or more
"""
    (d,) = parse_declarations(text, where="attributes.yml")
    assert (d.name, d.aggregation, d.period_days, d.default, d.criteria_match) == (
        "big_carts_last_7_days", "count", 7, 0, "any")
    assert [(e.name, e.vendor, e.version) for e in d.events] == [("purchase", "com.acme", "1-0-0"),
                                                                  ("page_view", None, None)]
    assert d.criteria[0].property_path == PropertyPath("contexts_com_acme_cart_1_0_0", 1, ("total",))
    assert d.criteria[1].value == ("DE", "FR")
    assert d.key == f"big_carts_last_7_days@{d.version}" and len(d.version) == 10
    assert "last 7 days" in d.describe() and "geo_country in" in d.describe()


@pytest.mark.parametrize("entry, message", [
    ({"name": "Bad-Name", "aggregation": "count"}, "name 'Bad-Name' is not accepted"),
    ({"name": "x", "aggregation": "median", "property": "a"}, "aggregation 'median' is not accepted"),
    ({"name": "x", "aggregation": "sum"}, "aggregation 'sum' needs a property"),
    ({"name": "x", "aggregation": "count", "window": 7}, "unknown key(s) window"),
    ({"name": "x", "aggregation": "last", "property": "a..b"}, "property 'a..b' is not accepted"),
    ({"name": "x", "aggregation": "count", "period": 0}, "period 0 is not accepted"),
    ({"name": "x", "aggregation": "count", "period": "week"}, "period 'week' is not accepted"),
    ({"name": "x", "aggregation": "sum", "property": "a", "type": "string"}, "sum adds numbers"),
    ({"name": "x", "aggregation": "max", "property": "a", "type": "int"}, "type 'int' is not accepted"),
    ({"name": "x", "aggregation": "count", "cap": 3}, "cap 3 is not accepted"),
    ({"name": "x", "aggregation": "count", "events": []}, "events [] is not accepted"),
    ({"name": "x", "aggregation": "count", "events": [{"name": "a", "schema": "b"}]},
     "event {'name': 'a', 'schema': 'b'}"),
    ({"name": "x", "aggregation": "count", "criteria": {"some": []}}, "use {all: [...]} or {any: [...]}"),
    ({"name": "x", "aggregation": "count", "criteria": {"all": [{"property": "a", "operator": "regex", "value": 1}]}},
     "operator 'regex' is not accepted"),
    ({"name": "x", "aggregation": "count", "criteria": {"all": [{"property": "a", "operator": "in", "value": "b"}]}},
     "operator 'in' takes a list"),
    ({"name": "x", "aggregation": "count", "criteria": {"all": [{"property": "a", "operator": "eq", "value": [1]}]}},
     "operator 'eq' takes one value"),
    ({"name": "x", "aggregation": "last", "property": "a", "default": [1]}, "default [1] is not accepted"),
    ({"name": "x", "aggregation": "count", "default": "none"}, "default 'none' is not accepted; use a number"),
    ({"name": "x", "aggregation": "max", "property": "a", "type": "number", "default": "n/a"}, "use a number"),
    ({"name": "x", "aggregation": "distinct_list", "property": "a", "default": "x"}, "a distinct_list has no default"),
])
def test_a_bad_declaration_is_refused_naming_the_attribute_and_the_value(entry, message):
    with pytest.raises(AttributeDeclarationError) as raised:
        declaration(entry, where="team.yml[0]")
    assert message in str(raised.value) and str(raised.value).startswith("team.yml[0]")


def test_names_are_unique_and_not_the_built_in_columns():
    with pytest.raises(AttributeDeclarationError, match="'last_os' is declared twice"):
        declarations([LAST_OS, LAST_OS])
    with pytest.raises(AttributeDeclarationError, match="'days_active' is a column the attributes table has"):
        declarations([{**LAST_OS, "name": "days_active"}], reserved=("days_active",))


def test_the_version_changes_with_what_is_computed_and_only_with_it():
    version = declaration(LAST_OS).version
    assert declaration({**LAST_OS, "description": "the OS of the latest event"}).version == version
    for changed in ({"period": 7}, {"aggregation": "first"}, {"default": "unknown"}, {"events": ["page_view"]},
                    {"property": "os_name"}, {"type": "number"}):
        assert declaration({**LAST_OS, **changed}).version != version, changed
    assert declaration({**LAST_OS, "period": "lifetime"}).version == version  # the default, written out
    a, b = declarations([LAST_OS, {"name": "views", "aggregation": "count"}])
    assert recorded_versions([b, a]) == f"{a.key},{b.key}" and recorded_versions([]) == "(none)"
    assert recorded_versions(DEFAULT_ATTRIBUTES[::-1]) is None  # the default declaration records nothing


def test_a_file_that_is_not_a_declaration_list_is_refused():
    with pytest.raises(AttributeDeclarationError, match="f.yml: not valid YAML"):
        parse_declarations("attributes: [", where="f.yml")
    with pytest.raises(AttributeDeclarationError, match="expected a mapping with a list under 'attributes'"):
        parse_declarations("- name: x", where="f.yml")
    with pytest.raises(AttributeDeclarationError, match="expected a list of attribute declarations"):
        parse_declarations("attributes: {name: x}", where="f.yml")


def test_the_setting_refuses_a_missing_or_bad_file_before_anything_runs(tmp_path):
    with pytest.raises(SettingsError, match="attributes_file='.*nowhere.yml' cannot be read"):
        Settings.load({"attributes_file": str(tmp_path / "nowhere.yml")}, environ={})
    bad = tmp_path / "bad.yml"
    bad.write_text("attributes:\n  - {name: x, aggregation: median, property: a}\n")
    with pytest.raises(SettingsError, match=r"bad.yml\[0\]: attribute 'x': aggregation 'median'"):
        Settings.load({"attributes_file": str(bad)}, environ={})
    good = tmp_path / "good.yml"
    good.write_text("attributes:\n  - {name: views, aggregation: count, events: [page_view]}\n")
    *defaults, views = Settings.load({"attributes_file": str(good)}, environ={}).declared_attributes()
    assert views.name == "views" and tuple(defaults) == DEFAULT_ATTRIBUTES
    assert Settings.load(environ={}).declared_attributes() == DEFAULT_ATTRIBUTES


def test_a_python_file_declares_the_same_attributes_as_the_yaml_it_generates(tmp_path):
    """A Python declaration file defines ATTRIBUTES, the YAML file's list built by code."""
    python_file = tmp_path / "team_attributes.py"
    python_file.write_text(
        "ATTRIBUTES = [{'name': f'{event}_count_{days}_days', 'aggregation': 'count', 'events': [event],\n"
        "               'period': days} for event in ('page_view', 'transaction') for days in (7, 30)]\n")
    yaml_file = tmp_path / "team_attributes.yml"
    yaml_file.write_text("attributes:\n" + "".join(
        f"  - {{name: {event}_count_{days}_days, aggregation: count, events: [{event}], period: {days}}}\n"
        for event in ("page_view", "transaction") for days in (7, 30)))
    from_python = Settings.load({"attributes_file": str(python_file)}, environ={}).declared_attributes()
    from_yaml = Settings.load({"attributes_file": str(yaml_file)}, environ={}).declared_attributes()
    assert [d.key for d in from_python] == [d.key for d in from_yaml]
    assert [d.name for d in from_python[len(DEFAULT_ATTRIBUTES):]] == [
        "page_view_count_7_days", "page_view_count_30_days", "transaction_count_7_days", "transaction_count_30_days"]


@pytest.mark.parametrize("code, message", [
    ("raise RuntimeError('no config')", r"bad.py: the Python file failed: RuntimeError: no config"),
    ("ATTRS = []", r"bad.py: a Python declaration file must define ATTRIBUTES"),
    ("ATTRIBUTES = {'name': 'x'}", r"bad.py: ATTRIBUTES: expected a list of attribute declarations"),
    ("ATTRIBUTES = [{'name': 'x', 'aggregation': 'median', 'property': 'a'}]",
     r"bad.py: ATTRIBUTES\[0\]: attribute 'x': aggregation 'median'"),
])
def test_a_bad_python_declaration_file_is_refused_naming_the_file(tmp_path, code, message):
    bad = tmp_path / "bad.py"
    bad.write_text(code + "\n")
    with pytest.raises(SettingsError, match=message):
        Settings.load({"attributes_file": str(bad)}, environ={})


def test_attributes_reading_the_same_rows_share_their_state_key_and_no_other_ones_do():
    base = {"name": "a", "aggregation": "count", "events": ["page_view"], "property": "page_urlpath",
            "criteria": {"all": [{"property": "geo_country", "operator": "eq", "value": "DE"}]}}
    a = declaration(base)
    same_rows = [declaration({**base, "name": "b"}), declaration({**base, "period": 7}),
                 declaration({**base, "aggregation": "distinct_list"}), declaration({**base, "default": 3}),
                 declaration({**base, "aggregation": "max", "type": "number"})]
    other_rows = [declaration({**base, "events": ["page_ping"]}), declaration({**base, "property": "page_title"}),
                  declaration({**base, "criteria": {"any": base["criteria"]["all"]}}),
                  declaration({**base, "criteria": {"all": [
                      {"property": "geo_country", "operator": "eq", "value": "FR"}]}})]
    assert {d.state_key for d in same_rows} == {a.state_key}
    assert len({a.state_key, *(d.state_key for d in other_rows)}) == 1 + len(other_rows)
    assert a.view == f"{a.state_key}/lifetime" and same_rows[1].view == f"{a.state_key}/7"
