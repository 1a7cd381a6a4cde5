#!/usr/bin/env bash
# Pins the merit binary a long run uses, so a run resumed days later (on another machine, after
# main has moved on) runs the code it started with:
#
#   scripts/pin-binary.sh DIR     # prints DIR/merit once it exists
#
# The first time, it copies the release build (building it if needed) to DIR/merit and records
# the commit it was built from in DIR/source-commit. The binary stays on this machine only
# (scripts/checkpoint.sh leaves it out); the commit goes with the run folder. On a machine
# without DIR/merit, the recorded commit is built again, always from a worktree of that commit
# (target/pinned/COMMIT), so edits in the checkout during the build cannot leak into it.
#
# To move a run to newer code on purpose (a fix that cannot change what is already logged),
# write the new commit into DIR/source-commit and delete DIR/merit; deleting source-commit
# instead would bring the old one back from the checkpoint. Record the change in
# DIR/source-commits.tsv (commit, what it ran), which the results keep beside the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/pin-binary.sh DIR}
sources=(crates Cargo.toml Cargo.lock)

# Are the working tree's sources those of commit $1 (no difference, nothing uncommitted)?
same_sources() {
  git diff --quiet "$1" -- "${sources[@]}" 2>/dev/null
}

if [ ! -x "$dir/merit" ]; then
  mkdir -p "$dir"
  if [ ! -f "$dir/source-commit" ]; then
    # The pin is built from a worktree of HEAD (below), so uncommitted edits cannot reach it;
    # say so rather than refuse: an unattended queue that starts a step while a session has
    # edits open must still pin (a refusal there once let a step fall back to an unpinned build).
    if ! same_sources HEAD; then
      echo "pin-binary: uncommitted changes under ${sources[*]} are not in the pin; pinning HEAD $(git rev-parse --short HEAD)" >&2
    fi
    git rev-parse HEAD > "$dir/source-commit"
  fi
  commit=$(cat "$dir/source-commit")
  # Always from a worktree of the commit, never from this checkout: a build from the checkout
  # compiles whatever the files hold while it runs, and a developer editing during the ~20
  # minute release build would end up in the pinned binary (it happened). Every pin builds in
  # one target folder of its own, target/pin-build, so compiled dependencies are reused from
  # pin to pin. Not target/ itself: cargo's fingerprints of the workspace crates did not tell
  # the two checkouts apart, so after a pinned build `cargo build --release` in this checkout took
  # the pinned commit's crates for fresh and left target/release/merit the old code (seen:
  # an edit to merit-lab did not reach the binary until `cargo clean -p`).
  tree=target/pinned/$commit
  [ -d "$tree" ] || git worktree add --detach "$tree" "$commit" >&2
  CARGO_TARGET_DIR=$PWD/target/pin-build cargo build --release -p merit-cli \
    --manifest-path "$tree/Cargo.toml" >&2
  cp target/pin-build/release/merit "$dir/merit.tmp"
  mv "$dir/merit.tmp" "$dir/merit"
  echo "pin-binary: $dir/merit built from $commit" >&2
fi
echo "$dir/merit"
