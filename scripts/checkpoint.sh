#!/usr/bin/env bash
# Carries the state of the long experiments (runs/, ignored by git) across machines. A session
# here can lose its machine between sessions, and with it every run folder: twelve hours of the
# Spider dev repair run were lost that way. Every run is resumable from its own files (episode
# logs, manifests, initial predictions, interact memories), so a copy of those files in the
# repository is enough to go on elsewhere:
#
#   scripts/checkpoint.sh save      # runs/ -> checkpoints/runs.tar.gz (commit it)
#   scripts/checkpoint.sh restore   # checkpoints/runs.tar.gz -> runs/, only where runs/ has
#                                   # nothing yet (never overwrites a newer local file)
#
# Left out: the pinned binaries (each machine pins its own build), the repair streams' memory
# folders (a resumed stream rebuilds its memory from its episode log), caches and logs of the
# scripts. The archive is deterministic (sorted names, fixed times and owners, gzip without a
# name or time), so saving twice over unchanged runs gives the same bytes and no new commit.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHIVE=${ARCHIVE:-checkpoints/runs.tar.gz}

case ${1:-} in
  save)
    [ -d runs ] || { echo "no runs/ to save" >&2; exit 1; }
    mkdir -p "$(dirname "$ARCHIVE")"
    tmp="$ARCHIVE.tmp.$$"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --exclude='runs/*/merit' --exclude='runs/queue' --exclude='runs/repair-dev/*/memory' \
      --exclude='runs/*.log' --exclude='*.tmp*' \
      -cf - runs | gzip -9n > "$tmp"
    mv "$tmp" "$ARCHIVE"
    echo "saved $(du -h "$ARCHIVE" | cut -f1) to $ARCHIVE"
    ;;
  restore)
    [ -f "$ARCHIVE" ] || { echo "no $ARCHIVE: nothing to restore"; exit 0; }
    # --skip-old-files: a file already here is newer than the archive's copy (a run went on
    # after the save), so it stays.
    tar --skip-old-files -xzf "$ARCHIVE"
    echo "restored runs/ from $ARCHIVE"
    ;;
  *)
    echo "usage: $0 save|restore" >&2
    exit 2
    ;;
esac
