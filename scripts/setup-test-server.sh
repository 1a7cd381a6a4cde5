#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server, `llama-server`, for the test that runs the
# OpenAI client against a real server (crates/merit-models/tests/openai_real_server.rs), and
# llama.cpp's own speed tool, `llama-batched-bench`, which `merit bench models --llama-bench`
# runs beside the embedded backend as its baseline (README, "Models").
#
# Where the sources come from: the vendored llama.cpp of the `llama-cpp-2` crate lacks the
# server's sources, so the script takes the complete llama.cpp tree that ships inside the
# `llama-cpp-python` source distribution on PyPI (`pip download --no-binary`), and builds only
# the `llama-server` target with CMake: no Python package is installed, nothing is fetched at
# build time (the Web UI download and OpenSSL are switched off).
#
# Idempotent: the binary is cached under
#   ${MERIT_TEST_SERVER_DIR:-${MERIT_HOME:-$HOME/.cache/merit}/test-server}/llama-cpp-python-<version>-native-noamx/bin/
# and a second run only prints its path. The last line printed is always the binary's path.
# Needs: python3 with pip, cmake, a C++17 compiler (Debian: cmake g++). Cold build on 2 cores:
# about 10 minutes.
set -euo pipefail

VERSION="${MERIT_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
ROOT="${MERIT_TEST_SERVER_DIR:-${MERIT_HOME:-$HOME/.cache/merit}/test-server}"
# The build flags are part of the name: a binary built with other flags is not reused.
DEST="$ROOT/llama-cpp-python-$VERSION-native-noamx"
BIN="$DEST/bin/llama-server"
BENCH="$DEST/bin/llama-batched-bench"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1 && [ -x "$BENCH" ]; then
  echo "llama-server already built" >&2
  echo "$BIN"
  exit 0
fi

for tool in python3 cmake; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup-test-server: $tool is required" >&2; exit 1; }
done
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 \
  || { echo "setup-test-server: a C++ compiler is required" >&2; exit 1; }

mkdir -p "$ROOT"
WORK="$(mktemp -d "$ROOT/.build-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "== downloading llama-cpp-python $VERSION (source distribution) from PyPI" >&2
python3 -m pip download --no-deps --no-binary=:all: --disable-pip-version-check --no-input \
  --progress-bar off -d "$WORK" "llama-cpp-python==$VERSION" >&2
tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -f "$SRC/tools/server/server.cpp" ] || { echo "setup-test-server: no server sources in $SRC" >&2; exit 1; }

# Compiled for this CPU as merit's embedded llama.cpp is (.cargo/config.toml), AMX excepted:
# ggml's AMX kernels crash on the Sapphire Rapids machines here (ggml-org/llama.cpp#20824).
# GGML_NATIVE=ON would add its own -march=native after these flags and bring AMX back.
# Elsewhere (ARM) these x86 flags do not exist: GGML_NATIVE=ON does the same job there.
if [ "$(uname -m)" = x86_64 ]; then
  NATIVE=OFF
  NATIVE_FLAGS="-march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
else
  NATIVE=ON
  NATIVE_FLAGS=""
fi

echo "== configuring llama.cpp (server only)" >&2
cmake -S "$SRC" -B "$WORK/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE="$NATIVE" \
  -DCMAKE_C_FLAGS="$NATIVE_FLAGS" \
  -DCMAKE_CXX_FLAGS="$NATIVE_FLAGS" \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF >&2

echo "== building llama-server and llama-batched-bench ($(nproc) jobs)" >&2
cmake --build "$WORK/build" --target llama-server llama-batched-bench -j "$(nproc)" >&2

# Install by rename, so that a killed build never leaves a half-copied binary behind.
STAGE="$ROOT/.install-$$"
rm -rf "$STAGE"
mkdir -p "$STAGE/bin"
cp "$WORK/build/bin/llama-server" "$STAGE/bin/llama-server"
cp "$WORK/build/bin/llama-batched-bench" "$STAGE/bin/llama-batched-bench"
"$STAGE/bin/llama-server" --version >&2
rm -rf "$DEST"
mv "$STAGE" "$DEST"
echo "$BIN"
