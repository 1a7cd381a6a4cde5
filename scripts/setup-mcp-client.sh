#!/usr/bin/env bash
# Installs the official MCP Python SDK (PyPI `mcp`) into a virtual environment of its own, for
# the test that drives merit's MCP tools as a client would, and prints that environment's
# python as the last line of output.
#
# * The version is pinned (MCP_SDK_VERSION, default 2.3.0) so CI drives the same client.
# * Idempotent: an environment that already has the version is reused.
#
# Usage:  MERIT_MCP_PYTHON=$(bash scripts/setup-mcp-client.sh | tail -n 1)
set -euo pipefail

# shellcheck source=scripts/python-venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/python-venv.sh"

VERSION="${MCP_SDK_VERSION:-2.3.0}"
DIR="${MERIT_MCP_CLIENT_DIR:-$HOME/.cache/merit/mcp-client-$VERSION}"
PYTHON="$DIR/bin/python"

if ! "$PYTHON" -c "import importlib.metadata as m; assert m.version('mcp') == '$VERSION'" 2>/dev/null; then
  fresh_venv "$DIR"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "mcp==$VERSION" >&2
fi
echo "$PYTHON"
