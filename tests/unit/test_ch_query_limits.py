"""Which engine limits `flywheel sql` sends to a ClickHouse server, by the user's readonly level."""

from __future__ import annotations

from clickhouse_connect.driver.models import SettingDef

from infra.clickhouse.query import server_limits
from infra.clickhouse.sql_policy import ENGINE_LIMITS


def _user(readonly: str) -> dict[str, SettingDef]:
    return {"readonly": SettingDef(name="readonly", value=readonly, readonly=readonly != "0")}


def test_a_user_that_may_change_settings_gets_readonly_and_the_limits():
    assert server_limits(_user("0")) == ENGINE_LIMITS
    assert server_limits({}) == ENGINE_LIMITS  # unknown: ask for everything; the server refuses loudly if it must


def test_a_readonly_user_runs_under_its_profile():
    assert server_limits(_user("1")) is None
    limits = server_limits(_user("2"))
    assert "readonly" not in limits and limits["max_execution_time"] == ENGINE_LIMITS["max_execution_time"]
