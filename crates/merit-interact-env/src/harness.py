# merit-interact: runner for BIRD-Interact Management test cases on SQLite and PostgreSQL.
#
# Written for merit; not taken from the benchmark. The benchmark's test cases are Python
# functions `test_case(pred_sqls, sol_sqls, db_name, conn[, conditions])` that call a few
# helper functions by name; this file provides helpers with those names and the documented
# behaviour, runs the tests in order on one connection to the working copy, and writes which
# test (if any) failed. Nothing a test prints or asserts is passed back: only an index.
# SQLite connections use Python's sqlite3; PostgreSQL connections use psycopg2 (the driver the
# benchmark's PostgreSQL harness uses), with the session time zone pinned to UTC as merit's
# own connections are.
#
# Usage: python3 -I harness.py SPEC.json RESULT.json

import inspect
import json
import math
import re
import sqlite3
import sys
import time
from collections import Counter
from datetime import date, datetime
from decimal import Decimal, ROUND_HALF_UP

_STATEMENT_TIMEOUT = 60.0
_POSTGRES = False


def _lock_down(conn):
    """Refuse ATTACH/DETACH and extension loading on the test connection."""
    if hasattr(conn, "setlimit") and hasattr(sqlite3, "SQLITE_LIMIT_ATTACHED"):
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    attach = getattr(sqlite3, "SQLITE_ATTACH", 24)
    detach = getattr(sqlite3, "SQLITE_DETACH", 25)
    function = getattr(sqlite3, "SQLITE_FUNCTION", 31)

    def authorizer(action, arg1, arg2, _db, _trigger):
        if action in (attach, detach):
            return sqlite3.SQLITE_DENY
        if action == function and (arg2 or "").lower() in ("load_extension", "fts3_tokenizer"):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorizer)


def execute_queries(queries, db_name=None, conn=None, *args, **kwargs):
    """Run one SQL string or a list of them; return (rows of the last, error?, timeout?).

    Statements without a result give an empty list. Changes are committed once all
    statements succeeded; on an error the open transaction is rolled back.
    """
    if isinstance(queries, str):
        queries = [queries]
    if _POSTGRES:
        return _execute_postgres(queries, conn)
    deadline = time.monotonic() + _STATEMENT_TIMEOUT
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10000)
    rows = []
    try:
        cursor = conn.cursor()
        for query in queries:
            cursor.execute(query)
            rows = cursor.fetchall() if cursor.description is not None else []
        conn.commit()
        return rows, False, False
    except sqlite3.OperationalError as error:
        _safe_rollback(conn)
        if "interrupted" in str(error):
            return None, False, True
        return None, True, False
    except Exception:
        _safe_rollback(conn)
        return None, True, False
    finally:
        conn.set_progress_handler(None, 0)


def _execute_postgres(queries, conn):
    """execute_queries on psycopg2: the server's statement_timeout (set on connect) bounds
    each statement; SQLSTATE 57014 (query_canceled) is a timeout."""
    rows = []
    try:
        cursor = conn.cursor()
        for query in queries:
            cursor.execute(query)
            rows = cursor.fetchall() if cursor.description is not None else []
        conn.commit()
        return rows, False, False
    except Exception as error:
        _safe_rollback(conn)
        if getattr(error, "pgcode", None) == "57014":
            return None, False, True
        return None, True, False


def _safe_rollback(conn):
    try:
        conn.rollback()
    except Exception:
        pass


def remove_comments(sql_list):
    """Delete block comments, then `--` comments that a line break follows (keeping the
    break), collapse blank-line runs, trim."""
    out = []
    for sql in sql_list:
        text = re.sub(r"/\*.*?\*/", "", sql, flags=re.DOTALL)
        text = re.sub(r"--[^\r\n]*?(\r\n|\r|\n)", r"\1", text)
        text = re.sub(r"\n\s*\n+", "\n", text)
        out.append(text.strip())
    return out


def remove_distinct(sql_list):
    """Drop tokens equal to 'distinct' (any case) after splitting on single spaces."""
    return [" ".join(t for t in sql.split(" ") if t.lower() != "distinct") for sql in sql_list]


def _unwrap_round(sql):
    while True:
        start = sql.lower().find("round(")
        if start < 0:
            return sql
        open_at = start + len("round(") - 1
        first_end, depth = len(sql), 0
        for i in range(open_at + 1, len(sql)):
            ch = sql[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    first_end = i
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                first_end = i
                break
        close, depth = -1, 0
        for i in range(open_at, len(sql)):
            if sql[i] == "(":
                depth += 1
            elif sql[i] == ")":
                depth -= 1
                if depth == 0:
                    close = i
                    break
        if close < 0:
            return sql
        sql = sql[:start] + sql[open_at + 1:first_end].strip() + sql[close + 1:]


def remove_round(sql_list):
    """Replace every ROUND( call by its first argument."""
    return [_unwrap_round(sql) for sql in sql_list]


def _round_nested(value):
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, Decimal):
        return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    if isinstance(value, list):
        return [_round_nested(v) for v in value]
    if isinstance(value, dict):
        return {k: _round_nested(v) for k, v in value.items()}
    return value


def preprocess_results(rows, decimal_places=2):
    """Normalise cells as the default test does: dates, rounding, JSON dumps."""
    if rows is None:
        return []
    out = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, (date, datetime)):
                cells.append(cell.strftime("%Y-%m-%d"))
                continue
            cell = _round_nested(cell)
            if isinstance(cell, (list, dict)):
                cell = json.dumps(cell, sort_keys=True)
            cells.append(cell)
        out.append(tuple(cells))
    return out


def ex_base(pred_sqls, sol_sqls, db_name=None, conn=None, conditions=None, *args, **kwargs):
    """1 when the prediction's last result equals the gold's (set or ordered), else 0."""
    if not pred_sqls or not sol_sqls:
        return 0
    pred, pred_err, pred_to = execute_queries(pred_sqls, db_name, conn)
    gold, gold_err, gold_to = execute_queries(sol_sqls, db_name, conn)
    if pred_err or pred_to or gold_err or gold_to:
        return 0
    pred, gold = preprocess_results(pred), preprocess_results(gold)
    if not pred or not gold:
        return 0
    ordered = isinstance(conditions, dict) and bool(conditions.get("order", False))
    return int(pred == gold) if ordered else int(set(pred) == set(gold))


def test_case_default(pred_sqls, sol_sqls, db_name=None, conn=None, conditions=None):
    """The default test: transform both sides, then ex_base."""
    clean = lambda sqls: remove_round(remove_distinct(remove_comments(sqls)))
    result = ex_base(clean(pred_sqls), clean(sol_sqls), db_name, conn, conditions)
    assert result == 1, "default test failed"
    return result


_HELPERS = {
    name: value
    for name, value in dict(globals()).items()
    if not name.startswith("__") and name not in ("_main", "_HELPERS", "_connect", "_SetupError")
}


def _connect(spec):
    """Open the test connection described by the spec (SQLite file or PostgreSQL DSN)."""
    global _POSTGRES
    if spec.get("pg_dsn") is not None:
        try:
            import psycopg2
        except ImportError:
            raise _SetupError(
                "psycopg2 is not installed for this python3; run scripts/setup-postgres.sh "
                "or `python3 -m pip install psycopg2-binary`"
            )
        _POSTGRES = True
        try:
            conn = psycopg2.connect(spec["pg_dsn"])
            with conn.cursor() as cursor:
                cursor.execute("SET TIME ZONE 'UTC'")
                cursor.execute(
                    "SET statement_timeout = %s", (max(1, int(_STATEMENT_TIMEOUT * 1000)),)
                )
            conn.commit()
        except Exception as error:
            raise _SetupError("cannot connect to PostgreSQL: %s" % str(error).strip())
        return conn
    conn = sqlite3.connect(spec["db_path"])
    _lock_down(conn)
    return conn


class _SetupError(Exception):
    """The database could not be reached: reported as a harness failure, not a test result."""


def _main():
    global _STATEMENT_TIMEOUT
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    _STATEMENT_TIMEOUT = float(spec.get("statement_timeout_s", 60.0))
    try:
        conn = _connect(spec)
    except _SetupError as error:
        with open(sys.argv[2], "w", encoding="utf-8") as handle:
            json.dump({"setup_error": str(error)}, handle)
        return
    conditions = {"order": bool(spec.get("order", False))}
    outcome = {"passed": True}
    for index, code in enumerate(spec["tests"]):
        namespace = dict(_HELPERS)
        namespace["execute_queries"] = execute_queries
        try:
            exec(compile(code, "<test case %d>" % index, "exec"), namespace)
            test = namespace.get("test_case")
            if not callable(test):
                raise RuntimeError("test case defines no test_case function")
            arguments = [list(spec["pred_sqls"]), list(spec["sol_sqls"]), spec["db_name"], conn]
            parameters = inspect.signature(test).parameters
            if len(parameters) >= 5:
                arguments.append(conditions)
            test(*arguments)
        except BaseException:  # noqa: BLE001 - any failure of a test fails the submission
            outcome = {"passed": False, "failed_index": index}
            break
    try:
        conn.commit()
        conn.close()
    except Exception:
        pass
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(outcome, handle)


if __name__ == "__main__":
    _main()
