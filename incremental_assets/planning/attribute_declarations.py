"""Per-user attributes a team declares (docs/rules.md 8): a YAML file of the user's, or Python.

    attributes:
      - name: pricing_page_views_last_7_days
        aggregation: count
        events: [page_view]                      # names, or {name, vendor, version}; default: all
        criteria:                                # all: every condition holds; any: one does
          all: [{property: page_urlpath, operator: like, value: "%pricing%"}]
        period: 7                                # days before the as-of day; default: lifetime
      - name: last_os
        aggregation: last
        property: contexts_nl_basjes_yauaa_context_1_0_0.operatingSystemName

A property is an atomic column, or a path into a context or self-describing-event column
(`column.field.subfield`; a context column holds a list of entities: the first one is read,
or `column[2].field` names another). Each declaration has a version, a digest of what it
computes: changing it recomputes that attribute alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import yaml

AGGREGATIONS = ("count", "sum", "min", "max", "mean", "first", "last", "most_frequent",
                "distinct_count", "distinct_list")
OPERATORS = ("eq", "neq", "gt", "gte", "lt", "lte", "like", "in")
VALUE_TYPES = ("string", "number", "decimal", "date")  # decimal: decimal(28,2); date: ISO text
DISTINCT_LIST_CAP = 100  # a distinct list's default cap
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_PROPERTY = re.compile(r"^(?P<column>[A-Za-z_][A-Za-z0-9_]*)"
                       r"(?:\[(?P<index>\d+)\])?"
                       r"(?P<path>(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")
_KEYS = {"name", "aggregation", "events", "property", "criteria", "period", "default", "type", "cap",
         "description"}


class AttributeDeclarationError(ValueError):
    """A declaration that cannot be computed; the message names the file, the attribute and the value."""


@dataclass(frozen=True)
class PropertyPath:
    """An atomic column, or a field inside a context / self-describing-event column."""

    column: str
    index: int | None = None  # the entity of a list column (None: the first, for a list)
    fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        index = "" if self.index is None else f"[{self.index}]"
        return self.column + index + "".join(f".{f}" for f in self.fields)


@dataclass(frozen=True)
class EventSelector:
    name: str
    vendor: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class Criterion:
    property_path: PropertyPath
    operator: str
    value: Any


@dataclass(frozen=True)
class AttributeDeclaration:
    name: str
    aggregation: str
    events: tuple[EventSelector, ...] = ()  # empty: every event
    property_path: PropertyPath | None = None  # count without a property counts events
    criteria: tuple[Criterion, ...] = ()
    criteria_match: str = "all"  # all | any
    period_days: int | None = None  # None: lifetime
    default: Any = None
    value_type: str = "string"  # how min, max, first, last and lists compare and return values
    cap: int | None = None  # distinct_list only
    description: str = ""
    version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Name and version: what the attributes table records it computed (VERSIONS_COLUMN)."""
        return f"{self.name}@{self.version}"

    @property
    def state_key(self) -> str:
        """What the state table keeps its rows under: a digest of the rows and values the
        attribute reads (events, criteria, property). Attributes that differ only in aggregation,
        period, type, default or cap share their states (counts of one event over four periods
        keep one state, not four)."""
        return _digest({"states": STATES_LAYOUT, **_selection(self)})

    @property
    def view(self) -> str:
        """Its states over its period: what the merge computes results for, shared by the
        attributes of one selection and period."""
        return f"{self.state_key}/{'lifetime' if self.period_days is None else self.period_days}"

    def describe(self) -> str:
        what = self.aggregation + (f" of {self.property_path}" if self.property_path else " of events")
        if self.events:
            what += " in " + ", ".join(_describe_event(e) for e in self.events)
        if self.criteria:
            joined = f" {'and' if self.criteria_match == 'all' else 'or'} "
            what += " where " + joined.join(f"{c.property_path} {c.operator} {c.value!r}" for c in self.criteria)
        what += ", lifetime" if self.period_days is None else f", last {self.period_days} days"
        if self.cap is not None:
            what += f", at most {self.cap} values"
        if self.default is not None:
            what += f", default {self.default!r}"
        return what


def _describe_event(event: EventSelector) -> str:
    parts = [event.name] + [p for p in (event.vendor, event.version) if p]
    return "/".join(parts)


def parse_property(text: Any, where: str) -> PropertyPath:
    if not isinstance(text, str) or not (match := _PROPERTY.match(text.strip())):
        raise AttributeDeclarationError(
            f"{where}: property {text!r} is not accepted; use an atomic column (page_urlpath) or a path "
            "into a context column (contexts_nl_basjes_yauaa_context_1_0_0.operatingSystemName)")
    index = match["index"]
    return PropertyPath(match["column"], int(index) if index is not None else None,
                        tuple(f for f in match["path"].split(".") if f))


def _events(value: Any, where: str) -> tuple[EventSelector, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise AttributeDeclarationError(f"{where}: events {value!r} is not accepted; give a list of event names")
    selectors = []
    for item in value:
        if isinstance(item, str) and item:
            selectors.append(EventSelector(item))
        elif (isinstance(item, Mapping) and isinstance(item.get("name"), str)
              and set(item) <= {"name", "vendor", "version"}):
            selectors.append(EventSelector(item["name"], item.get("vendor"), item.get("version")))
        else:
            raise AttributeDeclarationError(
                f"{where}: event {item!r} is not accepted; use a name or {{name, vendor, version}}")
    return tuple(selectors)


def _criteria(value: Any, where: str) -> tuple[tuple[Criterion, ...], str]:
    if value is None:
        return (), "all"
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in ("all", "any"):
        raise AttributeDeclarationError(
            f"{where}: criteria {value!r} is not accepted; use {{all: [...]}} or {{any: [...]}}")
    match, conditions = next(iter(value.items()))
    if not isinstance(conditions, list) or not conditions:
        raise AttributeDeclarationError(f"{where}: criteria.{match} must be a non-empty list of conditions")
    parsed = []
    for condition in conditions:
        if not isinstance(condition, Mapping) or set(condition) != {"property", "operator", "value"}:
            raise AttributeDeclarationError(
                f"{where}: condition {condition!r} is not accepted; use {{property, operator, value}}")
        operator = condition["operator"]
        if operator not in OPERATORS:
            raise AttributeDeclarationError(
                f"{where}: operator {operator!r} is not accepted; use one of {', '.join(OPERATORS)}")
        value = condition["value"]
        if (operator == "in") != isinstance(value, list):
            raise AttributeDeclarationError(
                f"{where}: operator {operator!r} takes {'a list' if operator == 'in' else 'one value'}, not {value!r}")
        if operator == "like" and not isinstance(value, str):
            raise AttributeDeclarationError(f"{where}: like takes a pattern string, not {value!r}")
        parsed.append(Criterion(parse_property(condition["property"], where), operator,
                                tuple(value) if isinstance(value, list) else value))
    return tuple(parsed), match


def _period(value: Any, where: str) -> int | None:
    if value is None or value == "lifetime":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AttributeDeclarationError(
            f"{where}: period {value!r} is not accepted; use lifetime or a whole number of days (7)")
    return value


def declaration(entry: Mapping[str, Any], where: str = "attributes") -> AttributeDeclaration:
    """One declaration from its mapping (a YAML entry), validated, with its version."""
    if not isinstance(entry, Mapping):
        raise AttributeDeclarationError(f"{where}: {entry!r} is not a mapping of name, aggregation, ...")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise AttributeDeclarationError(
            f"{where}: name {name!r} is not accepted; use lower-case letters, digits and _ (a column name)")
    where = f"{where}: attribute {name!r}"
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise AttributeDeclarationError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                                        f"accepted: {', '.join(sorted(_KEYS))}")
    aggregation = entry.get("aggregation")
    if aggregation not in AGGREGATIONS:
        raise AttributeDeclarationError(
            f"{where}: aggregation {aggregation!r} is not accepted; use one of {', '.join(AGGREGATIONS)}")
    prop = parse_property(entry["property"], where) if entry.get("property") is not None else None
    if prop is None and aggregation != "count":
        raise AttributeDeclarationError(f"{where}: aggregation {aggregation!r} needs a property")
    value_type = entry.get("type", "number" if aggregation in ("sum", "mean") else "string")
    if value_type not in VALUE_TYPES:
        raise AttributeDeclarationError(
            f"{where}: type {value_type!r} is not accepted; use one of {', '.join(VALUE_TYPES)}")
    if aggregation in ("sum", "mean") and value_type not in ("number", "decimal"):
        raise AttributeDeclarationError(f"{where}: {aggregation} adds numbers: its type is number or decimal")
    cap = entry.get("cap")
    whole_number = isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1
    if cap is not None and (aggregation != "distinct_list" or not whole_number):
        raise AttributeDeclarationError(f"{where}: cap {cap!r} is not accepted; "
                                        "a distinct_list takes a whole number >= 1")
    if aggregation == "distinct_list" and cap is None:
        cap = DISTINCT_LIST_CAP
    default = entry.get("default", 0 if aggregation in ("count", "distinct_count") else None)
    if aggregation == "distinct_list" and default is not None:
        raise AttributeDeclarationError(f"{where}: a distinct_list has no default (without values it is empty)")
    numbers = aggregation in ("count", "distinct_count", "sum", "mean") or value_type in ("number", "decimal")
    if default is not None and (isinstance(default, bool) or not isinstance(default, (str, int, float))
                                or (numbers and isinstance(default, str))):
        raise AttributeDeclarationError(
            f"{where}: default {default!r} is not accepted; use {'a number' if numbers else 'a string or a number'}")
    if value_type == "date" and default is not None and not _is_iso_date(default):
        raise AttributeDeclarationError(f"{where}: default {default!r} is not accepted; a date is YYYY-MM-DD")
    criteria, criteria_match = _criteria(entry.get("criteria"), where)
    description = entry.get("description") or ""
    if not isinstance(description, str):
        raise AttributeDeclarationError(f"{where}: description must be text")
    declared = AttributeDeclaration(
        name=name, aggregation=aggregation, events=_events(entry.get("events"), where), property_path=prop,
        criteria=criteria, criteria_match=criteria_match, period_days=_period(entry.get("period"), where),
        default=default, value_type=value_type, cap=cap, description=description)
    return _versioned(declared)


def _is_iso_date(value: Any) -> bool:
    try:
        date.fromisoformat(value)
    except (TypeError, ValueError):
        return False
    return True


# The layout of the state table's rows: part of every version, so that a new layout makes every
# attribute new to a table written with the old one (its states are computed again, once).
# 2: rows keyed by `state_key` (shared by attributes of one selection), not by attribute.
STATES_LAYOUT = 2


def _selection(declared: AttributeDeclaration) -> dict:
    """The rows and values an attribute reads."""
    return {"events": [[e.name, e.vendor, e.version] for e in declared.events],
            "property": str(declared.property_path) if declared.property_path else None,
            "criteria": [[str(c.property_path), c.operator, c.value] for c in declared.criteria],
            "match": declared.criteria_match}


def _digest(what: dict) -> str:
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=list).encode()).hexdigest()[:10]


def _versioned(declared: AttributeDeclaration) -> AttributeDeclaration:
    """With its version: a digest of everything that changes its values (not its description)."""
    what = {
        "name": declared.name, "aggregation": declared.aggregation, **_selection(declared),
        "period": declared.period_days, "default": declared.default,
        "type": declared.value_type, "cap": declared.cap, "states": STATES_LAYOUT,
    }
    return AttributeDeclaration(**{**declared.__dict__, "version": _digest(what)})


def declarations(entries: Sequence[Mapping[str, Any]], where: str = "attributes",
                 reserved: Sequence[str] = ()) -> tuple[AttributeDeclaration, ...]:
    """Every declaration of a list, validated: names unique and none of `reserved` (columns the
    attributes table has anyway)."""
    if not isinstance(entries, list):
        raise AttributeDeclarationError(f"{where}: expected a list of attribute declarations, got {entries!r}")
    parsed = tuple(declaration(entry, f"{where}[{i}]") for i, entry in enumerate(entries))
    seen: set[str] = set()
    for declared in parsed:
        if declared.name in reserved:
            raise AttributeDeclarationError(
                f"{where}: attribute {declared.name!r} is a column the attributes table has anyway; rename it")
        if declared.name in seen:
            raise AttributeDeclarationError(f"{where}: attribute {declared.name!r} is declared twice")
        seen.add(declared.name)
    return parsed


# The attributes table's column that records which declared attributes its rows hold.
VERSIONS_COLUMN = "attribute_versions"


def parse_declarations(text: str, where: str, reserved: Sequence[str] = ()) -> tuple[AttributeDeclaration, ...]:
    """The attributes a YAML declaration file declares (without the defaults it may take)."""
    return parse_declaration_file(text, where, reserved).attributes


@dataclass(frozen=True)
class DeclarationFile:
    attributes: tuple[AttributeDeclaration, ...]
    defaults: bool = True  # the default declaration's attributes come first (default_attributes.py)


def parse_declaration_file(text: str, where: str, reserved: Sequence[str] = ()) -> DeclarationFile:
    """A YAML declaration file (`attributes: [...]`, optionally `defaults: false`), validated;
    AttributeDeclarationError names `where` (the file) and what is wrong."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AttributeDeclarationError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(document, Mapping) or "attributes" not in document:
        raise AttributeDeclarationError(f"{where}: expected a mapping with a list under 'attributes'")
    unknown = sorted(set(document) - {"attributes", "defaults"})
    if unknown:
        raise AttributeDeclarationError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; "
                                        "accepted: attributes, defaults")
    defaults = document.get("defaults", True)
    if not isinstance(defaults, bool):
        raise AttributeDeclarationError(f"{where}: defaults {defaults!r} is not accepted; use true or false")
    return DeclarationFile(declarations(document["attributes"], where=where, reserved=reserved), defaults)
