#!/usr/bin/env bash
# Runs work on the cycles the machine's other work leaves idle: SCHED_IDLE, and where the
# kernel has autogroups, the session's scheduling group at nice 19. Both are needed: a process
# started with setsid is its own autogroup, which competes with the model run's group as an
# equal whatever the nice value of the tasks inside it (measured: a `nice -n 19` task generation
# started that way took 94% of a core, as much as the repair run beside it; see
# scripts/fuzz-all.sh for the fuzzer's measurement). Start it with setsid, so that the group
# it lowers is its own:
#
#   (setsid nohup scripts/idle.sh COMMAND ARGS... >> LOG 2>&1 < /dev/null &)
#
# Sourced (`. scripts/idle.sh`), it lowers the current shell and everything it starts.
chrt -i -p 0 $$ > /dev/null
echo 19 2> /dev/null > /proc/self/autogroup || true
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ $# -gt 0 ]; then
  exec nice -n 19 "$@"
fi
