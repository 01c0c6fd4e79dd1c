"""The analyst SQL policy: every statement of the attack corpus is refused, the docs' reads pass."""

from __future__ import annotations

import pytest

from app.demo_queries import last_n_scores, last_n_success, latest_versions, success_over_time, suite_mean_over_time, totals
from infra.clickhouse.sql_policy import SqlRefused, check, check_database
from tests.unit.sql_attacks import ALLOWED, ATTACKS, documented_queries


def test_the_corpus_is_large_enough():
    assert len(ATTACKS) >= 40


@pytest.mark.parametrize("sql", ATTACKS)
def test_every_attack_is_refused_with_a_reason(sql):
    with pytest.raises(SqlRefused) as err:
        check(sql)
    assert str(err.value)


@pytest.mark.parametrize("sql", ALLOWED + documented_queries() + [last_n_success("p"), last_n_scores("p"), totals("p"),
                                                                 latest_versions("p"), latest_versions("p", "demo-r1."),
                                                                 success_over_time("p", 10),
                                                                 suite_mean_over_time("p", 1.7e9, 30, 4)])
def test_reads_of_the_flywheel_data_pass(sql):
    assert check(sql)


def test_only_the_checked_tokens_run_comments_are_dropped():
    assert check("SELECT 1 -- DROP TABLE x\n, 2 /* file('/etc/passwd') */") == "SELECT 1 , 2"
    assert check("SELECT 'x' ;") == "SELECT 'x'"


def test_only_the_flywheel_database_can_be_selected():
    check_database(None, "flywheel")
    check_database("flywheel", "flywheel")
    with pytest.raises(SqlRefused):
        check_database("system", "flywheel")


def test_table_functions_are_refused_wherever_they_stand():
    for sql in ("SELECT * FROM steps AS s, url('http://x/', CSV, 'a Int32') AS u",
                "SELECT * FROM steps AS s LEFT JOIN generateRandom('a Int32') AS g ON 1",
                "SELECT * FROM (SELECT * FROM numbers(1)) AS a, python(x) AS b"):
        with pytest.raises(SqlRefused, match="not allowed"):
            check(sql)


def test_names_outside_the_flywheel_database_are_refused():
    for sql in ("SELECT * FROM default.x", "SELECT * FROM steps AS s, `default`.x AS y", "SHOW TABLES IN default",
                "DESCRIBE TABLE default.x", "SHOW CREATE DATABASE default"):
        with pytest.raises(SqlRefused, match="database"):
            check(sql)
    assert check("SELECT count() FROM other.steps", database="other")


def test_only_clickhouse_whitespace_separates_tokens():
    for space in ("\u00a0", "\u2028", "\x1c", "\u3000"):
        with pytest.raises(SqlRefused, match="is not allowed"):
            check(f"SELECT{space}1")
    assert check("SELECT\t1\r\n,\f2\v") == "SELECT\t1\r\n,\f2"
    assert check("SELECT '\u00a0é'") == "SELECT '\u00a0é'"  # inside a literal anything goes


def test_the_documented_queries_are_found():
    assert len(documented_queries()) >= 10
