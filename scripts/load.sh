#!/usr/bin/env bash
# The `uipc run` load test: 64 client processes in a ring, each doing ROUNDS rounds of
# semop (SEM_UNDO lock + unlock), msgsnd and msgrcv, checked for lost or reordered messages;
# the same program on the host kernel (in a private IPC namespace when root) and under
# `uipc run`, RUNS times each, interleaved. Prints each run's throughput.
#   bash scripts/load.sh [ROUNDS] [RUNS] [PROCS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1000} runs=${2:-3} procs=${3:-64}
cargo build -q --release -p uipc-cli -p uipc-preload
mkdir -p target/c-tests
cc -O2 -Wall -Wextra -Werror -o target/c-tests/load tests/c/load.c
host=(target/c-tests/load)
[ "$(id -u)" = 0 ] && host=(unshare --ipc target/c-tests/load)
for _ in $(seq "$runs"); do
    echo -n "host kernel: "
    "${host[@]}" "$procs" "$rounds"
    echo -n "uipc run:    "
    ./target/release/uipc run -- target/c-tests/load "$procs" "$rounds"
done
