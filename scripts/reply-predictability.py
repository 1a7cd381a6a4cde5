#!/usr/bin/env python3
"""How much of an interact agent's output a prompt-lookup draft could have proposed.

    scripts/reply-predictability.py EPISODES.jsonl[.gz] [N]

For every agent turn of every episode in an interact run's episode log, counts the reply's
words (whitespace-separated, a stand-in for tokens) whose preceding N words (default 3) occur
in the episode's earlier replies followed by that same word: the words an n-gram lookup over
the conversation so far would have drafted correctly. Earlier replies are in every later
prompt (with the observations, schema and hints, which this leaves out), so the share is an
estimate of what prompt-lookup decoding (merit-models' `PromptLookup`) could draft, not a
measurement of it.
"""
import gzip
import json
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    opener = gzip.open if path.endswith(".gz") else open
    episodes = turns = words = predictable = 0
    with opener(path, "rt", encoding="utf-8") as log:
        for line in log:
            episode = json.loads(line)
            episodes += 1
            seen = []  # the words of the earlier replies, in order
            follows = {}  # n-gram -> words that followed it in the earlier replies
            for turn in episode["turns"]:
                turns += 1
                reply = turn["reply"].split()
                words += len(reply)
                for i in range(n, len(reply)):
                    if reply[i] in follows.get(tuple(reply[i - n : i]), ()):
                        predictable += 1
                # Only the reply stays in the conversation (a repeat the guard replaced does
                # not), so only it is material for later turns.
                start = max(len(seen) - n, 0)
                seen.extend(reply)
                for i in range(start, len(seen) - n):
                    follows.setdefault(tuple(seen[i : i + n]), set()).add(seen[i + n])
    share = predictable / words if words else 0.0
    print(
        f"{episodes} episodes, {turns} agent turns, {words} reply words; "
        f"{predictable} ({share:.1%}) follow a {n}-word context seen earlier in the episode's replies"
    )


if __name__ == "__main__":
    main()
