"""`flywheel sql` output formats (pure)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from infra.clickhouse.query import render


COLUMNS = ["task", "episodes", "rate", "at"]
ROWS = [("click-test", 12, 0.5, datetime(2026, 1, 1, tzinfo=timezone.utc)), ("enter,text", 3, None, None)]


def test_table_is_aligned_with_numbers_right():
    lines = render(COLUMNS, ROWS, "table").splitlines()
    assert lines[0].split() == COLUMNS
    assert len({len(lines[1])} | {len(x) for x in lines[2:4]}) >= 1
    assert lines[2].index("12") + 2 == lines[0].index("episodes") + len("episodes")  # right-aligned
    assert "NULL" in lines[3]
    assert lines[-1] == "(2 rows)"


def test_csv_and_json():
    csv_lines = render(COLUMNS, ROWS, "csv").splitlines()
    assert csv_lines[0] == "task,episodes,rate,at"
    assert csv_lines[2] == '"enter,text",3,,'
    data = json.loads(render(COLUMNS, ROWS, "json"))
    assert data[0]["episodes"] == 12 and data[1]["rate"] is None


def test_empty_result():
    assert render(["a"], [], "table").splitlines()[-1] == "(0 rows)"
