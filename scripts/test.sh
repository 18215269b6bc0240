#!/usr/bin/env bash
# The project's test command (README's second command). Runs, in order:
#   0. the import-circle check (scripts/import-circles.py);
#   1. every crate's tests (unit, integration, property and stress tests), the documentation
#      without warnings, and the serve/run-only build of the `uipc` command;
#   2. the loom models: the lock-free and bucket-locked tables, the semaphore lock modes, the
#      waiter protocol and parked lock requests;
#   3. short differential runs against the host kernel (`uipc conform`), which need root for
#      the permission checks and a private IPC namespace, and one through `uipc run`.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== import circles (each one named in ARCHITECTURE.md)"
python3 scripts/import-circles.py --check > /dev/null

echo "== cargo test (workspace)"
# The release profile without its whole-program LTO (Cargo.toml), so test binaries link fast.
cargo test --workspace --profile release-tests

echo "== cargo doc (no warnings: broken or private intra-doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --workspace

echo "== uipc without its bench and conform features: builds, and links none of the benchmark's crates"
cargo check -q -p uipc-cli --no-default-features --profile release-tests
# (dashmap is not on the list: the engine's registries keep their index -> object maps in it.)
if cargo tree -q -p uipc-cli --no-default-features -e normal | grep -E 'plotters|indicatif|scc'; then
    echo "uipc-cli --no-default-features depends on a benchmark crate (above)" >&2
    exit 1
fi

echo "== loom models (modules named loom_*, and tests/loom_*.rs)"
loom_run() { RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom "$@"; }
loom_run cargo test -p uipc --profile release-tests --lib loom_
loom_run cargo test -p uipc --profile release-tests --test 'loom_*'

echo "== uipc conform (short differential runs against the host kernel)"
# The preload library too: `uipc bench shim` runs its calls under `uipc run`.
cargo build --release -p uipc-cli -p uipc-preload
for what in ipc locks timers; do
    ./target/release/uipc conform "$what" --ops 2000 --seed 1
done
# The same SysV IPC run natively and under `uipc run` (this build's binary and library, the
# semaphore fast path on), compared call by call: the kernel against the library and daemon.
timeout 600 ./target/release/uipc conform ipc --through-run --ops 2000 --seed 1

echo "== uipc bench smoke run (every scenario, small sizes; checks columns, not timings)"
./target/release/uipc bench all --quick --runs 1 --check > target/bench-smoke.txt
tail -n 1 target/bench-smoke.txt

echo "== uipc run (C test programs on the host kernel and under the daemon + preload library)"
bash scripts/test-run.sh
