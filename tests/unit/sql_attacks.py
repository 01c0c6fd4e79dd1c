"""The attack corpus for the analyst SQL policy: every statement must be refused.

Each targets something an analyst must not reach: files, URLs, other servers, processes, the
sink's environment (SASL and ClickHouse passwords), writes, DDL, settings that lift limits, and
parser tricks meant to smuggle one of those past a checker. Paths under /tmp/flywheel-attack-*
must never be created.
"""

ATTACKS = [
    # files and the process environment
    "SELECT count() FROM file('/etc/passwd','LineAsString')",
    "SELECT * FROM file('/etc/shadow','LineAsString')",
    "SELECT * FROM file('/proc/self/environ','RawBLOB')",
    "SELECT file('/etc/passwd')",
    "SELECT FILE ('/proc/self/environ')",
    "SELECT arrayMap(x -> file(x), ['/etc/passwd'])",
    "SELECT * FROM fileCluster('c', '/etc/passwd', 'LineAsString')",
    "DESCRIBE file('/etc/passwd', 'LineAsString')",
    "SELECT * FROM (SELECT * FROM file('/etc/passwd','LineAsString'))",
    "SELECT 1 FROM numbers(1), file('/etc/passwd','LineAsString')",
    # writes through table functions and clauses
    "INSERT INTO FUNCTION file('/tmp/flywheel-attack-1.csv','CSV','a Int32') SELECT 42",
    "SELECT 1 INTO OUTFILE '/tmp/flywheel-attack-2'",
    "SELECT 1 INTO OUTFILE '/tmp/flywheel-attack-3' TRUNCATE FORMAT CSV",
    "WITH 1 AS x SELECT x INTO OUTFILE '/tmp/flywheel-attack-4'",
    # URLs and other servers
    "SELECT * FROM url('http://127.0.0.1:9/x','CSV','a Int32')",
    "SELECT * FROM s3('http://127.0.0.1:9/b/k','CSV','a Int32')",
    "SELECT * FROM remote('127.0.0.1:9000', system.one)",
    "SELECT * FROM remoteSecure('127.0.0.1:9440', system.one)",
    "SELECT * FROM cluster('default', system.one)",
    "SELECT * FROM mysql('127.0.0.1:3306','db','t','u','p')",
    "SELECT * FROM postgresql('127.0.0.1:5432','db','t','u','p')",
    "SELECT * FROM hdfs('hdfs://127.0.0.1:9000/x','CSV','a Int32')",
    "SELECT * FROM jdbc('jdbc:x','t')",
    # processes, other databases and server internals
    "SELECT * FROM executable('id', 'TSV', 'a String')",
    "SELECT * FROM input('a Int32')",
    "SELECT * FROM merge('system', '^processes$')",
    "SELECT * FROM system.processes",
    "SELECT query FROM system.query_log",
    "SELECT * FROM `system`.`users`",
    'SELECT * FROM "system"."grants"',
    "SELECT * FROM system . stack_trace",
    "SHOW PROCESSLIST",
    "SHOW GRANTS",
    "SHOW USERS",
    "SELECT getClientHTTPHeader('Authorization')",
    "SELECT getSetting('max_execution_time')",
    # writes, DDL and administration
    "INSERT INTO steps SELECT * FROM steps",
    "DROP TABLE scored",
    "TRUNCATE TABLE trajectories",
    "ALTER TABLE steps DELETE WHERE 1",
    "CREATE TABLE x (a Int32) ENGINE = File(CSV, '/tmp/flywheel-attack-5')",
    "CREATE DICTIONARY d (a Int32) PRIMARY KEY a SOURCE(FILE(path '/etc/passwd' format 'CSV')) LAYOUT(FLAT()) LIFETIME(0)",
    "KILL QUERY WHERE 1",
    "SYSTEM SHUTDOWN",
    "SYSTEM DROP DNS CACHE",
    "OPTIMIZE TABLE steps FINAL",
    "SET readonly = 0",
    "USE system",
    "GRANT ALL ON *.* TO default",
    "ATTACH TABLE x FROM '/tmp/flywheel-attack-6' (a Int32) ENGINE = File(CSV)",
    # limits and settings
    "SELECT 1 SETTINGS readonly = 0",
    "SELECT 1 SETTINGS max_execution_time = 100000",
    "SELECT * FROM steps SETTINGS allow_introspection_functions = 1",
    # parser tricks: several statements, comments, quoting
    "SELECT 1; DROP TABLE scored",
    "SELECT 1;INSERT INTO FUNCTION file('/tmp/flywheel-attack-7','CSV','a Int32') SELECT 1",
    "SELECT 1 /* */; SELECT file('/etc/passwd')",
    "/* SELECT */ DROP TABLE scored",
    "-- SELECT\nDROP TABLE scored",
    "SELECT '\\'' , file('/etc/passwd')",
    "SELECT 'it''s', file('/etc/passwd')",
    "SELECT $$x$$, file('/etc/passwd')",
    "SELECT 1 /* unterminated",
    "SELECT 'unterminated",
    "(SELECT 1) ; DROP TABLE scored",
    "EXPLAIN INSERT INTO steps SELECT * FROM steps",
    "EXPLAIN PIPELINE SELECT * FROM file('/etc/passwd','LineAsString')",
    "",
    "   ;  ",
    # table functions after a comma of a FROM list, where a FROM/JOIN-only check does not look
    "SELECT * FROM numbers(1) AS a, Python(params) AS b",
    "SELECT * FROM numbers(1) AS a, filesystem('/etc') AS b",
    "SELECT * FROM (SELECT 1) AS a, view(SELECT query FROM system.processes) AS b",
    "SELECT count() FROM numbers(1) AS a, mergeTreeIndex(system, query_log) AS b",
    "DESCRIBE filesystem('/')",
    # names the policy never sees: bound identifiers, other databases, access entities
    "SELECT query FROM {d:Identifier}.{t:Identifier}",
    "SELECT * FROM {t:identifier}",
    "SELECT * FROM steps AS s, default.x AS y",
    "SELECT * FROM steps AS s JOIN default.x AS y ON s.episode_id = y.id",
    "SELECT 1 WHERE 1 IN default.x",
    "SHOW TABLES FROM default",
    "SHOW COLUMNS FROM processes FROM system",
    "SHOW CREATE USER default",
    "SHOW CREATE ROW POLICY p ON steps",
    "SELECT getServerSetting('path')",
    "SELECT showCertificate()",
    # characters ClickHouse lexes differently from Python: non-ASCII spaces, control characters
    "SELECT 1 INTO\u00a0OUTFILE '/tmp/flywheel-attack-8'",
    "SELECT\u2028file('/etc/passwd')",
    "SELECT 1\x1c; DROP TABLE scored",
    "SELECT 1 \x00",
]

# Reads the docs and the demo's report run: they must keep working.
ALLOWED = [
    "SELECT policy_version, task_name, episodes, success_rate, mean_reward FROM v_success_by_policy",
    "SELECT minute, episodes, mean_reward, success_rate FROM v_reward_over_time",
    "SELECT * FROM v_staleness_histogram",
    "SELECT name, update, value FROM v_trainer_metrics WHERE name = 'losses/pg_loss'",
    "SELECT step_index, round(avg(thought_words), 1) AS mean_words, count() AS steps FROM steps FINAL "
    "GROUP BY step_index ORDER BY step_index",
    "SELECT count() AS inserted, (SELECT count() FROM steps FINAL) AS distinct_steps FROM steps",
    "WITH t AS (SELECT 1 AS a) SELECT t.a FROM t",
    "SELECT name, engine FROM system.tables WHERE database = 'flywheel'",
    "SELECT name, value, readonly FROM system.settings LIMIT 10000",
    "SHOW TABLES",
    "DESCRIBE TABLE steps",
    "EXISTS TABLE steps",
    "EXPLAIN SYNTAX SELECT count() FROM steps",
    "SELECT 'a;b' -- a comment\n",
    "SELECT number FROM numbers(3)",
    "SELECT {n:UInt32} AS n",
    "SELECT extract(DAY FROM s.ingested_at) AS d, trim(BOTH ' ' FROM s.thought) FROM steps AS s LIMIT 1",
    "SELECT s.step_index, t.status FROM steps AS s, trajectories AS t WHERE s.episode_id = t.episode_id LIMIT 1",
    "SELECT r FROM steps ARRAY JOIN range(3) AS r, arrayMap(x -> x, [1, 2, 3]) AS m LIMIT 1",
    "SELECT 1 IN tuple(1, 2), format('{}', 1)",
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'flywheel'",
    "SHOW TABLES FROM system",
    "SHOW COLUMNS FROM tables FROM system",
    "SHOW CREATE TABLE flywheel.steps",
]


def documented_queries() -> list[str]:
    """The queries docs/analytics.md shows (``$ flywheel sql "..."``) and docs/analytics_examples.py runs."""
    import ast
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    shown = re.findall(r'^\$ flywheel sql "(.+)"$', (docs / "analytics.md").read_text(), flags=re.M)
    module = ast.parse((docs / "analytics_examples.py").read_text())
    run = next(ast.literal_eval(node.value) for node in module.body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "QUERIES")
    return sorted(set(shown) | set(run))
