"""Declared attributes computed the plain way (docs/rules.md 8): every user's matching events of
the period, aggregated at once in Python, no states. The tests compare the product's
state-merging computation with this."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections import Counter, defaultdict

from incremental_assets.planning.attribute_declarations import AttributeDeclaration, Criterion, PropertyPath


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return str(value)


def property_text(row: dict, prop: PropertyPath) -> str | None:
    value = row.get(prop.column)
    if not prop.fields and prop.index is None:
        return _text(value)
    if value is None:
        return None
    node = json.loads(value) if isinstance(value, str) else value
    if isinstance(node, list):
        index = prop.index or 0
        node = node[index] if index < len(node) else None
    elif prop.index is not None:
        return None
    for name in prop.fields:
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, (dict, list)):
        return json.dumps(node, separators=(",", ":"))
    return _text(node)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _holds(row: dict, criterion: Criterion) -> bool:
    value, target, op = property_text(row, criterion.property_path), criterion.value, criterion.operator
    if value is None:
        return False
    if op == "like":
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in target)
        return re.fullmatch(pattern, value, re.DOTALL) is not None
    if op == "in":
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in target):
            return _number(value) in [float(v) for v in target]
        return value in [str(v) for v in target]
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        left, right = _number(value), float(target)
        if left is None:
            return False
    else:
        left, right = value, str(target)
    return {"eq": left == right, "neq": left != right, "gt": left > right, "gte": left >= right,
            "lt": left < right, "lte": left <= right}[op]


def applies(row: dict, declared: AttributeDeclaration) -> bool:
    if declared.events and not any(
            row.get("event_name") == e.name and (not e.vendor or row.get("event_vendor") == e.vendor)
            and (not e.version or row.get("event_version") == e.version) for e in declared.events):
        return False
    if declared.criteria:
        results = [_holds(row, c) for c in declared.criteria]
        return any(results) if declared.criteria_match == "any" else all(results)
    return True


def _in_period(day: dt.date, declared: AttributeDeclaration, as_of: dt.date) -> bool:
    if day >= as_of:
        return False
    return declared.period_days is None or day >= as_of - dt.timedelta(days=declared.period_days)


def value_of(rows: list[dict], declared: AttributeDeclaration):
    """The attribute over these (matching, in-period) rows of one user."""
    kind = declared.aggregation
    if kind == "count" and declared.property_path is None:
        return len(rows) or None
    texts = [(row["derived_tstamp"], property_text(row, declared.property_path)) for row in rows]
    texts = [(t, v) for t, v in texts if v is not None]

    def typed(v):
        return _number(v) if declared.value_type == "number" else v

    if kind == "count":
        result = len(texts)
    elif kind in ("sum", "mean"):
        numbers = [_number(v) for _, v in texts]
        numbers = [n for n in numbers if n is not None]
        if not texts:
            result = None
        elif kind == "sum":
            result = math.fsum(numbers) if numbers else None
        else:
            result = math.fsum(numbers) / len(numbers) if numbers else None
    elif kind in ("min", "max"):
        values = [typed(v) for _, v in texts if typed(v) is not None]
        result = (min(values) if kind == "min" else max(values)) if values else None
    elif kind == "first":
        pairs = [(t, typed(v)) for t, v in texts if typed(v) is not None]
        result = min(pairs)[1] if pairs else None
    elif kind == "last":
        pairs = [(t, typed(v)) for t, v in texts if typed(v) is not None]
        result = max(pairs)[1] if pairs else None
    elif kind == "most_frequent":
        counts = Counter(v for _, v in texts)
        last_seen = {}
        for t, v in texts:
            last_seen[v] = max(last_seen.get(v, t), t)
        candidates = [(n, last_seen[v], typed(v)) for v, n in counts.items() if typed(v) is not None]
        result = max(candidates)[2] if candidates else None
    elif kind == "distinct_count":
        result = len({v for _, v in texts})
    elif kind == "distinct_list":
        result = sorted({typed(v) for _, v in texts if typed(v) is not None})[:declared.cap]
    else:
        raise AssertionError(kind)
    if kind in ("count", "distinct_count") and result == 0:
        return None  # no event counted: the default
    return result


def declared_values(rows: list[dict], users, declared: list[AttributeDeclaration] | tuple,
                    as_of: dt.date) -> dict[str, dict]:
    """{user: {attribute name: value}} for each of `users`, from `rows` (filtered events:
    event_date, domain_userid, derived_tstamp and the properties' columns)."""
    by_user = defaultdict(list)
    for row in rows:
        by_user[row["domain_userid"]].append(row)
    out = {}
    for user in users:
        out[user] = {}
        for d in declared:
            matching = [r for r in by_user.get(user, []) if _in_period(r["event_date"], d, as_of) and applies(r, d)]
            value = value_of(matching, d)
            out[user][d.name] = d.default if value is None else value
    return out


def comparable(value):
    """Floats rounded (sums in another order differ in the last bits); lists as lists."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    return value


def as_snowplow_text(value) -> str:
    """A value as Snowplow's expected CSV writes it: lists joined by ', ', whole numbers without
    a decimal point, null as an empty cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if hasattr(value, "__len__") and not isinstance(value, str):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
