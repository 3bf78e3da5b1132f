"""`aiops bench dashboards` sends each query as Grafana would on first load: the variables at
their defaults substituted (regex-escaped inside regex literals), the range the dashboard's or the
panel's own, the interval derived from it."""

from __future__ import annotations

import pytest

from benchmarks.dashboards import _seconds, macros_for, render


def test_a_query_is_rendered_at_the_defaults() -> None:
    macros = macros_for(6 * 3600, 10.0, now_ns=10**19)
    assert macros["__interval"] == "22s"  # 21,600 s over 1,000 points
    assert macros_for(300, 10.0, now_ns=10**19)["__interval"] == "10s"  # never under the scrape interval
    query = 'SELECT max("t") FROM "gpu" WHERE "node" =~ /^$node$/ AND $timeFilter GROUP BY time($__interval)'
    assert render(query, {"node": ["n00000.x"]}, macros) == (
        'SELECT max("t") FROM "gpu" WHERE "node" =~ /^n00000\\.x$/ AND '
        f"time >= {10**19 - 6 * 3600 * 10**9}ns AND time <= {10**19}ns GROUP BY time(22s)"
    )
    assert "/^.*$/" in render(query, {"node": [".*"]}, macros)  # "All" as its allValue


def test_ranges_are_read_as_grafana_writes_them() -> None:
    assert _seconds("now-6h") == 21_600 and _seconds("30d") == 2_592_000 and _seconds("5m") == 300
    with pytest.raises(ValueError, match="does not read"):
        _seconds("now/d")
