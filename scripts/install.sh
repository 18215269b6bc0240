#!/usr/bin/env bash
# Installs uipc: builds the release binaries, then copies `uipc` to PREFIX/bin and its preload
# library to PREFIX/lib/uipc, where `uipc run` looks for it (beside the binary first, then
# ../lib/uipc). Usage: scripts/install.sh [--prefix PREFIX]   (default /usr/local)
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

cargo build --release -p uipc-cli -p uipc-preload
install -d "$prefix/bin" "$prefix/lib/uipc"
install -m 755 target/release/uipc "$prefix/bin/uipc"
install -m 755 target/release/libuipc_preload.so "$prefix/lib/uipc/libuipc_preload.so"
echo "installed $prefix/bin/uipc and $prefix/lib/uipc/libuipc_preload.so"
