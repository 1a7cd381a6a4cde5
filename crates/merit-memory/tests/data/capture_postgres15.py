#!/usr/bin/env python3
"""Regenerates postgres15_errors.jsonl: runs each bad query of the list below against a
PostgreSQL 15 server loaded with postgres15_schema.sql and records psql's error output verbatim.

Usage: capture_postgres15.py HOST PORT > postgres15_errors.jsonl
"""
import json
import os
import subprocess
import sys

QUERIES = [
    # schema references
    "SELECT nme FROM singer",
    "SELECT T1.nme FROM singer AS T1",
    "SELECT name FROM singers",
    "SELECT name FROM public.nope",
    "SELECT T3.name FROM singer AS T1",
    "SELECT stadium_id FROM stadium JOIN concert ON stadium.stadium_id = concert.stadium_id",
    "SELECT * FROM singer AS a JOIN singer AS a ON true",
    "SELECT name FROM singer AS s WHERE singer.age > 1",
    "SELECT s.name FROM singer s JOIN concert c USING (nope)",
    "SELECT name FROM singer ORDER BY nope",
    # parse failures
    "SELEC name FROM singer",
    "SELECT name FROM singer WHERE",
    "SELECT name FROM singer WHERE name = 'abc",
    'SELECT "" FROM singer',
    "SELECT * FROM (SELECT name FROM singer)",
    "SELECT name FROM singer LIMIT 1, 2",
    "SELECT name FROM singer UNION SELECT name, age FROM singer",
    "SELECT name FROM singer ORDER BY 9",
    "SELECT DISTINCT name FROM singer ORDER BY age",
    "SELECT YEAR(song_release_year) FROM singer",
    "SELECT substr() FROM singer",
    # aggregation
    "SELECT name, age FROM singer GROUP BY name",
    "SELECT name FROM singer WHERE count(*) > 1",
    "SELECT max(count(*)) FROM singer",
    "SELECT name FROM singer GROUP BY count(*)",
    "SELECT name FROM singer GROUP BY 9",
    "SELECT avg(name) FROM singer",
    "SELECT count(name, age) FROM singer",
    "SELECT name FROM singer WHERE rank() OVER () > 1",
    "SELECT avg(age) FILTER (WHERE sum(age) > 1) FROM singer",
    # types and values
    "SELECT name FROM singer WHERE age = 'abc'",
    "SELECT name FROM singer WHERE age = name",
    "SELECT name FROM singer WHERE name LIKE 1",
    "SELECT name FROM singer WHERE age",
    "SELECT name FROM singer WHERE is_male = 'maybe'",
    "SELECT DATE '2020-13-45'",
    "SELECT name FROM singer WHERE age IN (SELECT age, name FROM singer)",
    "SELECT name FROM singer UNION SELECT age FROM singer",
    "SELECT coalesce(name, age) FROM singer",
    "SELECT to_date('2020', 'YYYY') + 'x'",
    "SELECT round(age::float8, 2) FROM singer",
    # execution
    "SELECT 1/0",
    "SELECT 2147483647 + 1",
    "SELECT (SELECT age FROM singer)",
    "SELECT count(*) FROM singer, pg_sleep(2)",
    "DELETE FROM singer",
    # no rule
    "SELECT name FROM singer WHERE age > ANY (1)",
]


def main():
    host, port = sys.argv[1], sys.argv[2]
    for sql in QUERIES:
        # Read-only sessions with a short statement timeout, as an evaluation backend would
        # run model SQL; -c sends the text as one statement, exactly as written.
        env = dict(os.environ)
        env["PGOPTIONS"] = "-c statement_timeout=500 -c default_transaction_read_only=on"
        done = subprocess.run(
            ["psql", "-X", "-q", "-h", host, "-p", port, "-U", "postgres", "-c", sql],
            capture_output=True, text=True, env=env,
        )
        message = done.stderr.strip("\n")
        print(json.dumps({"sql": sql, "message": message}, ensure_ascii=False))


if __name__ == "__main__":
    main()
