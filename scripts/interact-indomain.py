#!/usr/bin/env python3
"""The task sets of the interact experiments' `indomain` arm (scripts/interact-experiments.sh):
memory written on the evaluation split's own databases, from tasks that are not evaluation
tasks.

  interact-indomain.py seeds DEV_JSON EVAL_TASKS OUT
      The Spider dev questions on the evaluation tasks' databases that seed no evaluation task:
      neither the question an evaluation task was generated from (its `generation.seed_id` is
      `dev-N`, N the index in DEV_JSON) nor one with the same SQL. Written to OUT (a Spider
      question file, for `merit interact gen --seeds`).

  interact-indomain.py stream TASKS EVAL_TASKS OUT
      The tasks of TASKS whose reference SQL is no evaluation task's, in order, to OUT: a memory
      holding an evaluation task's own answer would measure recall, not experience.

Both write OUT atomically and print what they kept to stderr. SQL is compared with whitespace
collapsed and case folded.
"""
import json
import os
import sys


def normalized(sql):
    return " ".join(sql.split()).lower()


def read_tasks(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def seeds(dev_json, eval_tasks, out):
    with open(dev_json) as f:
        questions = json.load(f)
    tasks = read_tasks(eval_tasks)
    databases = {t["selected_database"] for t in tasks}
    used = {int(t["generation"]["seed_id"].rsplit("-", 1)[1]) for t in tasks}
    used_sql = {normalized(t["generation"]["seed_sql"]) for t in tasks}
    kept = [
        q
        for index, q in enumerate(questions)
        if q["db_id"] in databases and index not in used and normalized(q["query"]) not in used_sql
    ]
    write_atomically(out, json.dumps(kept, indent=1) + "\n")
    print(f"{len(kept)} seed questions on {len(databases)} evaluation databases", file=sys.stderr)


def stream(tasks_file, eval_tasks, out):
    evaluation = {normalized(sql) for t in read_tasks(eval_tasks) for sql in t["sol_sql"]}
    with open(tasks_file) as f:
        lines = [line.rstrip("\n") + "\n" for line in f if line.strip()]
    kept = [
        line
        for line in lines
        if not {normalized(sql) for sql in json.loads(line)["sol_sql"]} & evaluation
    ]
    write_atomically(out, "".join(kept))
    print(
        f"in-database stream: {len(kept)} of {len(lines)} tasks "
        f"({len(lines) - len(kept)} share an evaluation task's SQL)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    commands = {"seeds": seeds, "stream": stream}
    if len(sys.argv) != 5 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
