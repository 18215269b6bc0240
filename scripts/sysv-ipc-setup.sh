#!/usr/bin/env bash
# Fetches the Python package sysv_ipc (source release, which carries its test suite) and
# builds it into a virtualenv under target/sysv_ipc, once. scripts/test-run.sh runs that test
# suite under `uipc run`. Needs python3 with venv and headers, and a C compiler (.ci/run
# installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.2.0
dir=target/sysv_ipc
if [ -x "$dir/venv/bin/python" ] && "$dir/venv/bin/python" -c 'import sysv_ipc' 2>/dev/null &&
    [ -d "$dir/sysv_ipc-$version/tests" ]; then
    exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" download -q --no-deps --no-binary :all: -d "$dir" "sysv-ipc==$version"
"$dir/venv/bin/pip" install -q --no-deps "$dir/sysv_ipc-$version.tar.gz"
tar xzf "$dir/sysv_ipc-$version.tar.gz" -C "$dir"
