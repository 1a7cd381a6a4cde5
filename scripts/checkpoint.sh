#!/usr/bin/env bash
# Carries the state of the long experiments (runs/, ignored by git) across machines. A session
# here can lose its machine between sessions, and with it every run folder: twelve hours of the
# Spider dev repair run were lost that way. Every run is resumable from its own files (episode
# logs, manifests, initial predictions, interact memories), so a copy of those files in the
# repository is enough to go on elsewhere:
#
#   scripts/checkpoint.sh save      # runs/ -> checkpoints/runs.tar.gz, and the reply cache
#                                   # -> checkpoints/replies/ (commit both)
#   scripts/checkpoint.sh restore   # both back, only where nothing is there yet (never
#                                   # overwrites a newer local file)
#
# The reply cache ($MERIT_HOME/replies, default ~/.cache/merit/replies) goes with the runs
# because later steps are planned on it: the paper-setting run shares the dev run's initial
# predictions through it, and the live experiment's no-memory arm is the dev run's Iterative
# replies. Its segments are append-only files of one writer each, so an older copy of a
# segment is a prefix of the newer one. Each segment is saved as its own gzip file
# (checkpoints/replies/SEGMENT.jsonl.gz), not in one archive: only the segment a running process
# appends to changes between two saves, so a checkpoint commit adds that one file and git keeps
# a single copy of the others (one archive of the whole cache added ~6 MB to every checkpoint
# commit). Segments are never removed from there, even when the local cache was cleared. The
# cache is left out (with a message) past REPLIES_MAX_MB compressed, so the repository never
# takes an unbounded cache.
#
# Left out: the pinned binaries (their source-commit files stay: scripts/pin-binary.sh builds
# the same code again on another machine), the repair streams' memory
# folders (a resumed stream rebuilds its memory from its episode log), caches and logs of the
# scripts. The archive is deterministic (sorted names, fixed times and owners, gzip without a
# name or time), so saving twice over unchanged runs gives the same bytes and no new commit.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHIVE=${ARCHIVE:-checkpoints/runs.tar.gz}
REPLIES_DIR=${REPLIES_DIR:-checkpoints/replies}
REPLIES_MAX_MB=${REPLIES_MAX_MB:-40}
MERIT_HOME=${MERIT_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/merit}

case ${1:-} in
  save)
    [ -d runs ] || { echo "no runs/ to save" >&2; exit 1; }
    mkdir -p "$(dirname "$ARCHIVE")"
    tmp="$ARCHIVE.tmp.$$"
    trap 'rm -f "$tmp" "$tmp.tar"' EXIT
    # Runs append to their logs while this reads them: GNU tar then exits 1 ("file changed as
    # we read it"), and the copy holds a prefix of the log, at worst with a torn last line,
    # which a resumed run cuts off. Only a status above 1 is a real failure.
    snapshot() { # snapshot DIR NAME [TAR OPTIONS...]: deterministic tar.gz of DIR/NAME to $tmp
      local dir=$1 name=$2 status=0
      shift 2
      tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --warning=no-file-changed --exclude='*.tmp*' "$@" -C "$dir" -cf "$tmp.tar" "$name" \
        || status=$?
      [ "$status" -le 1 ] || { rm -f "$tmp.tar"; return "$status"; }
      gzip -9n < "$tmp.tar" > "$tmp"
      rm -f "$tmp.tar"
    }
    snapshot . runs --exclude='runs/*/merit' --exclude='runs/pins/*/merit' --exclude='runs/repair-dev/*/memory' --exclude='runs/repair-calibration*/*/memory' \
      --exclude='runs/*.log'
    mv "$tmp" "$ARCHIVE"
    echo "saved $(du -h "$ARCHIVE" | cut -f1) to $ARCHIVE"
    if [ -d "$MERIT_HOME/replies" ]; then
      staged="$REPLIES_DIR.tmp.$$"
      trap 'rm -f "$tmp" "$tmp.tar"; rm -rf "$staged"' EXIT
      mkdir -p "$staged"
      for segment in "$MERIT_HOME"/replies/*.jsonl; do
        [ -f "$segment" ] || continue
        # gzip without a name or time: an unchanged segment gives the same bytes.
        gzip -9n < "$segment" > "$staged/$(basename "$segment").gz"
      done
      if [ "$(du -sb "$staged" | cut -f1)" -gt $((REPLIES_MAX_MB * 1024 * 1024)) ]; then
        echo "reply cache over ${REPLIES_MAX_MB} MB compressed: not saved" >&2
      else
        mkdir -p "$REPLIES_DIR"
        changed=0
        for file in "$staged"/*.gz; do
          [ -f "$file" ] || continue
          target="$REPLIES_DIR/$(basename "$file")"
          cmp -s "$file" "$target" || { mv "$file" "$target"; changed=$((changed + 1)); }
        done
        echo "saved $(du -sh "$REPLIES_DIR" | cut -f1) to $REPLIES_DIR ($changed segments changed)"
      fi
      rm -rf "$staged"
    fi
    ;;
  restore)
    # --skip-old-files: a file already here is newer than the archive's copy (a run went on
    # after the save), so it stays.
    if [ -f "$ARCHIVE" ]; then
      tar --skip-old-files -xzf "$ARCHIVE"
      echo "restored runs/ from $ARCHIVE"
    else
      echo "no $ARCHIVE: no runs to restore"
    fi
    # A segment already here is the newer copy (segments only grow), so it stays.
    restored=0
    for file in "$REPLIES_DIR"/*.jsonl.gz; do
      [ -f "$file" ] || continue
      mkdir -p "$MERIT_HOME/replies"
      segment="$MERIT_HOME/replies/$(basename "$file" .gz)"
      if [ ! -e "$segment" ]; then
        # Decompressed beside the folder, then renamed in: the cache reads every file in it.
        gzip -dc < "$file" > "$MERIT_HOME/replies.restore.tmp.$$"
        mv "$MERIT_HOME/replies.restore.tmp.$$" "$segment"
        restored=$((restored + 1))
      fi
    done
    echo "restored $restored reply-cache segments in $MERIT_HOME/replies from $REPLIES_DIR"
    ;;
  *)
    echo "usage: $0 save|restore" >&2
    exit 2
    ;;
esac
