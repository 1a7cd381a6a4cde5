#!/usr/bin/env bash
# Sourced by the setup scripts that install a PyPI package into a virtual environment of its
# own (setup-mcp-client.sh, setup-xllamacpp-server.sh): one place for making that environment.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/python-venv.sh"
#   fresh_venv DIR    # DIR removed and made anew; python3-venv installed first where missing

fresh_venv() {
  local dir="$1"
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
}
