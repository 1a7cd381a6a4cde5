#!/usr/bin/env bash
# Runs one fuzz target (issue 22) for SECONDS with cargo-fuzz (libFuzzer), starting from the
# committed seeds in fuzz/seeds/TARGET and the working corpus fuzz/corpus/TARGET (not
# committed: libFuzzer adds every input that reaches new code there, thousands of files, and
# later runs continue from it). A crash or hang is written to fuzz/artifacts/TARGET/; turn
# each into a regression test in the crate it concerns before fixing it.
#
#   scripts/fuzz.sh extract_sql 600
#
# Needs a nightly toolchain and `cargo install cargo-fuzz`. Targets: extract_sql, spider_sql,
# interact_action, episode_log, interact_log, model_json, task_file, generated_tasks,
# prm_annotations, live_journal, serve_config, reply_cache, openai_reply, serve_request,
# memory_store, metafiles, dataset
# (`cargo +nightly fuzz list` in fuzz/).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
mkdir -p "corpus/$target" "seeds/$target"
# libFuzzer's per-input limit is wall time: a fuzzer that shares the machine at idle priority
# (scripts/fuzz-all.sh) can be kept off the CPU for seconds, so it raises FUZZ_TIMEOUT; a
# timeout found that way is only a finding once the input also times out when run alone.
timeout=${FUZZ_TIMEOUT:-10}
exec cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
  -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048
