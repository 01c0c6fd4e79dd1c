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
]

# Reads the docs and the demo's report run: they must keep working.
ALLOWED = [
    "SELECT policy_version, task_name, episodes, success_rate, mean_reward FROM v_success_by_policy",
    "SELECT minute, episodes, mean_reward, success_rate FROM v_reward_over_time",
    "SELECT * FROM v_staleness_histogram",
    "SELECT name, update, value FROM v_trainer_metrics WHERE name = 'loss'",
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
]
