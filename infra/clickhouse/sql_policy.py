"""What an analyst's SQL may do: read the flywheel database and a few system tables, nothing else.

``check(sql)`` is a pure function: it tokenises the statement the way ClickHouse does (strings
with ``\\`` and ``''`` escapes, quoted identifiers, nested comments, only ClickHouse's whitespace
between tokens) and returns the statement rebuilt from exactly the tokens it checked, comments
dropped, or raises ``SqlRefused`` with the reason. Callers run the returned text, never the
original, so a comment or quoting trick that would parse differently here and in the engine has
nothing left to hide in.

Allowed: one statement; SELECT / WITH ... SELECT / EXPLAIN [AST|SYNTAX|PLAN|PIPELINE|ESTIMATE]
of a SELECT / SHOW TABLES|DATABASES|COLUMNS|CREATE (tables, views, databases) / DESCRIBE /
EXISTS; tables of the flywheel database, the catalogue tables of ``SYSTEM_TABLES`` and
information_schema (views over system.tables, columns and databases). Refused: every write, DDL,
KILL, SYSTEM, SET, USE, GRANT; INTO OUTFILE; SETTINGS clauses; every table function but the
generators of ``TABLE_FUNCTIONS``, wherever it stands (FROM, JOIN, a FROM list's comma, DESCRIBE,
an expression); functions that reach files, the host or the server's configuration; other
databases in a table position; ``{name:Identifier}`` parameters, which would name a table the
policy never saw.

This is the second line. The first is the engine: the endpoint and `flywheel sql` run every
statement with ``readonly=1`` (no writes, no setting changes, no table function that reads
files, URLs or other servers) and a time and memory limit the client cannot raise
(``ENGINE_LIMITS``). On chDB 4.4 ``readonly=1`` alone still runs the scalar ``file()``,
INTO OUTFILE, KILL QUERY, ``merge()``, ``view()`` and reads of system.processes: those the
policy refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STATEMENTS = {"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"}
EXPLAIN_KINDS = {"AST", "SYNTAX", "PLAN", "PIPELINE", "ESTIMATE"}
SHOW_WHAT = {"TABLES", "DATABASES", "COLUMNS", "CREATE"}
# SHOW CREATE of access entities (users, roles, quotas, row policies, profiles) is not catalogue
SHOW_CREATE_REFUSED = {"USER", "USERS", "ROLE", "ROLES", "QUOTA", "QUOTAS", "ROW", "POLICY", "POLICIES",
                       "PROFILE", "PROFILES", "SETTINGS", "MASKING", "NAMED", "FUNCTION"}
FORBIDDEN_WORDS = {"INTO", "OUTFILE", "SETTINGS", "INFILE"}
# the generators an analyst may select from; every other table function is refused wherever it appears
TABLE_FUNCTIONS = {"numbers", "numbers_mt", "zeros", "zeros_mt", "values", "generate_series", "generateseries"}
# every table function chDB 4.4 knows (system.table_functions, lower-cased); an integration test fails
# when the engine grows one that is neither here nor in TABLE_FUNCTIONS
KNOWN_TABLE_FUNCTIONS = {
    "arrowstream", "azureblobstorage", "azureblobstoragecluster", "bigquery", "cluster", "clusterallreplicas", "cosn",
    "deltalake", "deltalakeazure", "deltalakeazurecluster", "deltalakecluster", "deltalakelocal", "deltalakes3",
    "deltalakes3cluster", "dictionary", "eval", "executable", "file", "filecluster", "filesystem", "format",
    "fuzzjson", "fuzzquery", "gcs", "generaterandom", "generateseries", "generate_series", "hdfs", "hdfscluster",
    "hudi", "hudicluster", "iceberg", "icebergazure", "icebergazurecluster", "icebergcluster", "iceberghdfs",
    "iceberghdfscluster", "iceberglocal", "iceberglocalcluster", "icebergs3", "icebergs3cluster", "input", "jdbc",
    "loop", "merge", "mergetreeanalyzeindexes", "mergetreeanalyzeindexesuuid", "mergetreecodecblockcounts",
    "mergetreeindex", "mergetreeprojection", "mergetreetextindex", "mongodb", "mysql", "null", "numbers",
    "numbers_mt", "odbc", "oss", "paimon", "paimonazure", "paimonazurecluster", "paimoncluster", "paimonhdfs",
    "paimonhdfscluster", "paimonlocal", "paimons3", "paimons3cluster", "postgresql", "primes", "prometheusquery",
    "prometheusqueryrange", "python", "redis", "remote", "remotesecure", "s3", "s3cluster", "sqlite",
    "sqlstandardvalues", "timeseriesdata", "timeseriesmetricfamilies", "timeseriesmetrics", "timeseriessamples",
    "timeseriesselector", "timeseriestags", "url", "urlcluster", "values", "view", "viewexplain", "viewifpermitted",
    "ytsaurus", "zeros", "zeros_mt",
}
# table functions whose name is also an ordinary function: refused in FROM/JOIN only
SCALAR_TOO = {"format"}
# ordinary functions that reach files, the host, the server's configuration or the request
FORBIDDEN_FUNCTIONS = {
    "file", "getclienthttpheader", "addresstoline", "addresstolinewithinlines", "addresstosymbol", "demangle",
    "getsetting", "getsettingordefault", "getserversetting", "getmacro", "showcertificate", "currentrequesturl",
    "fuzzquery", "fuzzjson",
} | (KNOWN_TABLE_FUNCTIONS - TABLE_FUNCTIONS - SCALAR_TOO)
SYSTEM_TABLES = {"tables", "columns", "databases", "parts", "functions", "table_functions", "data_type_families",
                 "table_engines", "formats", "one", "numbers", "numbers_mt", "zeros", "settings", "time_zones"}
# information_schema holds views over system.tables / columns / databases only
CATALOGUE_DATABASES = {"system", "information_schema"}
# ClickHouse's whitespace; anything else outside literals is refused (it would lex differently there)
WHITESPACE = " \t\n\r\f\v"
# the engine enforces these on every statement; readonly=1 comes last so nothing after it applies
ENGINE_LIMITS = {"max_execution_time": "30", "timeout_overflow_mode": "throw", "max_memory_usage": str(2 << 30),
                 "max_result_bytes": str(256 << 20), "result_overflow_mode": "throw", "readonly": "1"}


class SqlRefused(ValueError):
    """The statement is not a read of the flywheel data; the message says what was refused."""


@dataclass(frozen=True)
class Token:
    kind: str  # "word" | "ident" (quoted identifier) | "string" | "number" | "param" | "punct"
    text: str  # as written (quotes included)
    gap: str = ""  # what separated it from the previous token: whitespace, or " " for a comment

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    @property
    def name(self) -> str:
        """An identifier's name, unquoted and lower-cased (words and quoted identifiers)."""
        if self.kind == "word":
            return self.text.lower()
        if self.kind == "ident":
            return self.text[1:-1].replace(self.text[0] * 2, self.text[0]).lower()
        return ""


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(0[xX][0-9A-Fa-f]+|0[bB][01]+|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)")
_PARAM = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_(), ]+\}")
_PUNCT2 = ("::", "<=", ">=", "!=", "<>", "||", "==", "->")
_PUNCT1 = set("()[],.;+-*/%<>=?:")


def _quoted(sql: str, i: int, quote: str) -> int:
    """Index just past the literal starting at ``i``: backslash escapes, doubled quotes."""
    j = i + 1
    while j < len(sql):
        c = sql[j]
        if c == "\\":
            j += 2
            continue
        if c == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    raise SqlRefused(f"unterminated {quote} literal at character {i}")


def tokenize(sql: str) -> list[Token]:
    raw = _lex(sql)
    out, end = [], 0
    for start, tok in raw:
        gap = sql[end:start]
        out.append(Token(tok.kind, tok.text, gap if all(c in WHITESPACE for c in gap) else " "))
        end = start + len(tok.text)
    return out


def _lex(sql: str) -> list[tuple[int, Token]]:
    out: list[tuple[int, Token]] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in WHITESPACE:
            i += 1
        elif sql.startswith("--", i) or c == "#":
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:  # ClickHouse nests block comments
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise SqlRefused("unterminated /* comment")
            i = j
        elif c == "'":
            j = _quoted(sql, i, "'")
            out.append((i, Token("string", sql[i:j])))
            i = j
        elif c in "`\"":
            j = _quoted(sql, i, c)
            if "\\" in sql[i:j]:
                raise SqlRefused("backslash inside a quoted identifier")
            out.append((i, Token("ident", sql[i:j])))
            i = j
        elif c == "{":
            m = _PARAM.match(sql, i)
            if not m:
                raise SqlRefused(f"unexpected '{{' at character {i} (query parameters look like {{name:Type}})")
            if "identifier" in m.group().lower():  # {t:Identifier} would name a table the policy never saw
                raise SqlRefused(f"query parameter {m.group()} is not allowed: parameters carry values, not names")
            out.append((i, Token("param", m.group())))
            i = m.end()
        elif m := _WORD.match(sql, i):
            out.append((i, Token("word", m.group())))
            i = m.end()
        elif m := _NUMBER.match(sql, i):
            out.append((i, Token("number", m.group())))
            i = m.end()
        elif sql[i:i + 2] in _PUNCT2:
            out.append((i, Token("punct", sql[i:i + 2])))
            i += 2
        elif c in _PUNCT1:
            out.append((i, Token("punct", c)))
            i += 1
        else:
            raise SqlRefused(f"character {c!r} at position {i} is not allowed")
    return out


def _single_statement(tokens: list[Token]) -> list[Token]:
    while tokens and tokens[-1].text == ";":
        tokens = tokens[:-1]
    if any(t.text == ";" for t in tokens):
        raise SqlRefused("one statement per request")
    if not tokens:
        raise SqlRefused("empty statement")
    return tokens


def _check_start(tokens: list[Token]) -> None:
    k = 0
    while k < len(tokens) and tokens[k].text == "(":
        k += 1
    first = tokens[k].upper if k < len(tokens) else ""
    if first not in STATEMENTS:
        raise SqlRefused(f"only reads are allowed (SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN), not {tokens[k].text!r}"
                         if k < len(tokens) else "empty statement")
    rest = tokens[k + 1:]
    if first == "EXPLAIN":
        if rest and rest[0].upper in EXPLAIN_KINDS:
            rest = rest[1:]
        j = 0
        while j < len(rest) and rest[j].text == "(":
            j += 1
        if j >= len(rest) or rest[j].upper not in ("SELECT", "WITH"):
            raise SqlRefused("EXPLAIN is allowed for SELECT queries only")
    if first == "SHOW" and (not rest or rest[0].upper not in SHOW_WHAT):
        raise SqlRefused(f"SHOW {' '.join(t.text for t in rest[:2])} is not allowed; "
                         f"use SHOW {'|'.join(sorted(SHOW_WHAT))}")
    if first == "SHOW" and rest[0].upper == "CREATE" and len(rest) > 1 and rest[1].upper in SHOW_CREATE_REFUSED:
        raise SqlRefused(f"SHOW CREATE {rest[1].text} is not allowed (tables, views and databases only)")


# keywords that end a FROM list at their nesting level
_CLAUSES = {"WHERE", "PREWHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "OFFSET", "UNION", "EXCEPT", "INTERSECT",
            "WINDOW", "QUALIFY", "FORMAT", "SELECT", "WITH"}


def _table_slots(tokens: list[Token]) -> tuple[set[int], set[int], set[int]]:
    """Indices of (table expressions, database names, system table names), read from the clause structure.

    A table starts after FROM, after JOIN (not ARRAY JOIN: its list is expressions), after a comma of a
    FROM list, after IN, and after DESCRIBE / EXISTS / SHOW CREATE [TABLE]. FROM inside a function's
    parentheses is an expression (``extract(DAY FROM t)``) unless a SELECT precedes it there.
    """
    tables: set[int] = set()
    databases: set[int] = set()
    catalogue: set[int] = set()  # SHOW COLUMNS FROM processes FROM system names a system table
    in_from: dict[int, bool] = {}  # nesting depth -> inside a FROM list
    call: dict[int, bool] = {0: False}  # nesting depth -> these parentheses are a function's arguments
    selected: dict[int, bool] = {}  # nesting depth -> a SELECT was seen at this level
    depth = 0
    for k, t in enumerate(tokens):
        prev = tokens[k - 1] if k else None
        u = t.upper
        if t.text == "(":
            depth += 1
            call[depth] = prev is not None and prev.kind in ("word", "ident")
            in_from[depth] = selected[depth] = False
        elif t.text == ")":
            depth = max(depth - 1, 0)
        elif u == "SELECT":
            selected[depth], in_from[depth] = True, False
        elif u == "FROM" and (not call.get(depth) or selected.get(depth)):
            in_from[depth] = True
            tables.add(k + 1)
        elif u == "JOIN":
            arrays = prev is not None and prev.upper == "ARRAY"
            in_from[depth] = not arrays
            if not arrays:
                tables.add(k + 1)
        elif u in _CLAUSES:
            in_from[depth] = False
        elif t.text == "," and in_from.get(depth):
            tables.add(k + 1)
        elif u == "IN":  # x IN db.table; x IN tuple(1, 2) is an ordinary function call
            j = k + 1 + (k + 1 < len(tokens) and tokens[k + 1].upper == "TABLE")
            if j + 1 < len(tokens) and tokens[j + 1].text == ".":
                tables.add(j)
    head = [t.upper for t in tokens[:4]]
    kinds = {"TABLE", "VIEW", "DICTIONARY", "TEMPORARY"}
    if head[:1] in (["DESCRIBE"], ["DESC"], ["EXISTS"]) or head[:2] == ["SHOW", "CREATE"]:
        k = 2 if head[0] == "SHOW" else 1
        while k < len(tokens) and tokens[k].upper in kinds:
            k += 1
        if k < len(tokens) and tokens[k].upper == "DATABASE":
            databases.add(k + 1)
        else:
            tables.add(k)
    if head[:2] in (["SHOW", "TABLES"], ["SHOW", "COLUMNS"]):  # SHOW TABLES FROM db, SHOW COLUMNS FROM t FROM db
        wheres = [k + 1 for k, t in enumerate(tokens) if t.upper in ("FROM", "IN")]
        if wheres and (head[1] == "TABLES" or len(wheres) > 1):
            databases.add(wheres[-1])
        if head[1] == "COLUMNS" and len(wheres) > 1 and wheres[-1] < len(tokens) and tokens[wheres[-1]].name == "system":
            catalogue.add(wheres[0])
    return tables, databases, catalogue


def _check_database_name(t: Token, database: str) -> None:
    if t.name not in CATALOGUE_DATABASES | {database.lower()}:
        raise SqlRefused(f"database {t.text} is not readable here (only {database}, system and information_schema)")


def _check_table(tokens: list[Token], k: int, database: str) -> None:
    """The table expression starting at ``k``: a flywheel table, a catalogue table or an allowed generator."""
    t = tokens[k]
    nxt = tokens[k + 1] if k + 1 < len(tokens) else None
    if t.kind not in ("word", "ident") or nxt is None:
        return  # a subquery or the end; its insides are checked on their own
    if nxt.text == "(" and t.name not in TABLE_FUNCTIONS:
        raise SqlRefused(f"table function {t.text}() is not allowed (only {', '.join(sorted(TABLE_FUNCTIONS))})")
    if nxt.text == ".":
        _check_database_name(t, database)


def _check_body(tokens: list[Token], database: str) -> None:
    tables, databases, catalogue = _table_slots(tokens)
    for k in sorted(catalogue):
        if k < len(tokens) and tokens[k].name not in SYSTEM_TABLES:
            raise SqlRefused(f"system.{tokens[k].name} is not readable (allowed: {', '.join(sorted(SYSTEM_TABLES))})")
    for k in sorted(tables):
        if k < len(tokens):
            _check_table(tokens, k, database)
    for k in sorted(databases):
        if k < len(tokens) and tokens[k].kind in ("word", "ident"):
            _check_database_name(tokens[k], database)
    for k, t in enumerate(tokens):
        nxt = tokens[k + 1] if k + 1 < len(tokens) else None
        prev = tokens[k - 1] if k else None
        qualified = (prev is not None and prev.text == ".") or (nxt is not None and nxt.text == ".")
        if t.upper in FORBIDDEN_WORDS and not qualified:  # system.settings is a table, not a clause
            raise SqlRefused(f"{t.upper} is not allowed here (no output files, no settings changes)")
        if t.kind in ("word", "ident") and nxt is not None and nxt.text == "(" and t.name in FORBIDDEN_FUNCTIONS:
            raise SqlRefused(f"function {t.text}() is not allowed: it reaches outside the flywheel database")
        if t.kind in ("word", "ident") and nxt is not None and nxt.text == "." and k + 2 < len(tokens):
            if prev is not None and prev.text == ".":
                continue  # a column of db.table.column
            target = tokens[k + 2]
            if t.name == "system" and target.name not in SYSTEM_TABLES:
                raise SqlRefused(f"system.{target.name} is not readable (allowed: {', '.join(sorted(SYSTEM_TABLES))})")


def check(sql: str, database: str = "flywheel") -> str:
    """The statement rebuilt from its checked tokens, or SqlRefused."""
    tokens = _single_statement(tokenize(sql))
    _check_start(tokens)
    _check_body(tokens, database)
    return "".join(t.gap + t.text for t in tokens).strip()


def check_database(name: str | None, database: str) -> None:
    """The ``database`` a client may select: the flywheel one (or none)."""
    if name not in (None, "", database):
        raise SqlRefused(f"database {name!r} is not readable here; use {database!r}")
