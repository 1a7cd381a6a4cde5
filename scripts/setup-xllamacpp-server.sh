#!/usr/bin/env bash
# Installs llama.cpp's own OpenAI-compatible HTTP server, already compiled, for the test that runs
# the OpenAI client against a real server (crates/merit-models/tests/models/openai_real_server.rs),
# and prints the path of an executable `llama-server` that takes llama-server's flags.
#
# What it installs: PyPI's `xllamacpp` wheel (the C++ server of llama.cpp compiled into a Python
# extension; prebuilt CPU wheels) into a virtual environment of its own, and
# scripts/xllamacpp-server.py behind `bin/llama-server`. CI uses it instead of
# scripts/setup-test-server.sh, whose source build of llama-server cost about 20 CPU-minutes of
# CI's 2 cores for this one test (measured 2026-12-07: a cold CI run spent 27 minutes of wall
# time building it beside the lints). scripts/setup-test-server.sh stays the way to get
# `llama-batched-bench`, the baseline tool of `merit bench models --llama-bench`, built natively.
#
# * Pinned: the version (XLLAMACPP_VERSION) and, on x86-64 Linux, the wheel's sha256 (pip
#   --require-hashes); elsewhere pip installs the version's wheel for that platform unpinned.
# * Idempotent: an environment that already has the version is reused.
#
# Usage:  MERIT_LLAMA_SERVER=$(bash scripts/setup-xllamacpp-server.sh | tail -n 1)
set -euo pipefail

# shellcheck source=scripts/python-venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/python-venv.sh"

# The version whose x86-64 Linux wheel is pinned by hash, and that wheel's sha256
# (xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl).
PINNED_VERSION="2026.10.11549"
X86_64_SHA256="c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261"
VERSION="${XLLAMACPP_VERSION:-$PINNED_VERSION}"
DIR="${MERIT_XLLAMACPP_DIR:-${MERIT_HOME:-$HOME/.cache/merit}/xllamacpp-$VERSION}"
PYTHON="$DIR/bin/python"
LAUNCHER="$DIR/bin/llama-server"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! "$PYTHON" -c "import importlib.metadata as m; assert m.version('xllamacpp') == '$VERSION'" 2>/dev/null; then
  fresh_venv "$DIR"
  requirement="xllamacpp==$VERSION"
  if [ "$(uname -sm)" = "Linux x86_64" ] && [ "$VERSION" = "$PINNED_VERSION" ]; then
    requirements="$(mktemp)"
    trap 'rm -f "$requirements"' EXIT
    echo "$requirement --hash=sha256:$X86_64_SHA256" > "$requirements"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --require-hashes -r "$requirements" >&2
  else
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      "$requirement" >&2
  fi
fi

# The launcher is copied (not linked) so the environment works wherever the checkout moves.
cp "$HERE/xllamacpp-server.py" "$DIR/xllamacpp-server.py"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$PYTHON" "$DIR/xllamacpp-server.py" > "$LAUNCHER.tmp"
chmod +x "$LAUNCHER.tmp"
mv "$LAUNCHER.tmp" "$LAUNCHER"
echo "$LAUNCHER"
