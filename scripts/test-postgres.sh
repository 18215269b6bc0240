#!/usr/bin/env bash
# PostgreSQL under one `uipc run`, started as root, the server run as the postgres user through
# su (the private daemon serves descendants whatever uid they switch to). For the default
# settings and then shared_memory_type=sysv: initdb into a temporary directory, start (unix
# socket in that directory, no TCP), `pgbench -i` and a few seconds of pgbench, kill -9 of the
# postmaster, and a restart that must recover (uipc run reaps the orphaned backends, so the
# pid in postmaster.pid is gone and the old shared memory segment is no longer attached).
#
# Everything runs in a fresh IPC namespace: while a server runs, /proc/sysvipc/shm shows the
# server's segment through the library, and the kernel's files (read with LD_PRELOAD= set
# empty, which the library leaves as it is) hold only their header lines; so do they at the end.
#
# Root only (called by scripts/test-run.sh); needs Debian's postgresql package (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

bindir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d | sort -V | tail -n 1)
if [ -z "$bindir" ] || [ ! -x "$bindir/postgres" ]; then
    echo "test-postgres: no PostgreSQL server under /usr/lib/postgresql/*/bin" >&2
    exit 1
fi

# The postgres user must reach uipc, its library and the cluster: all in one directory.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp target/release/uipc target/release/libuipc_preload.so "$work/"
chmod 755 "$work"
mkdir "$work/pg"
chown postgres: "$work/pg"

# One cluster's life, run as postgres: $1 names the settings (default or sysv).
cat > "$work/cycle.sh" <<'EOF'
set -euo pipefail
mode=$1 bin=$2 top=$3
dir=$top/$mode
data=$dir/data sock=$dir/sock log=$dir/server.log
mkdir -p "$dir" "$sock"
fail() {
    echo "test-postgres ($mode): $*" >&2
    for f in "$log" "$dir"/step.log; do
        [ -e "$f" ] && { echo "---- $f" >&2; cat "$f" >&2; }
    done
    "$bin/pg_ctl" -D "$data" stop -m immediate > /dev/null 2>&1 || true
    exit 1
}
step() {
    local what=$1
    shift
    timeout 40 "$@" > "$dir/step.log" 2>&1 || fail "$what failed (exit $?)"
}
# Lists the kernel's SysV objects (lines after each file's header).
kernel_objects() {
    LD_PRELOAD= tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg
}
step initdb "$bin/initdb" -D "$data" -A trust -U postgres --no-sync --no-instructions
{
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$sock'"
    echo "fsync = off"
    if [ "$mode" = sysv ]; then echo "shared_memory_type = sysv"; fi
} >> "$data/postgresql.conf"
step start "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 start
step "pgbench -i" "$bin/pgbench" -h "$sock" -i -q postgres
step pgbench "$bin/pgbench" -h "$sock" -c 4 -T 3 postgres
grep -q "number of failed transactions: 0 " "$dir/step.log" || fail "pgbench: failed transactions"
# The server's segment is uipc's, and no kernel object exists.
[ "$(tail -n +2 /proc/sysvipc/shm | wc -l)" -ge 1 ] || fail "no segment in uipc's /proc/sysvipc/shm"
[ -z "$(kernel_objects)" ] || fail "kernel SysV objects: $(kernel_objects)"

postmaster=$(head -n 1 "$data/postmaster.pid")
children=$(pgrep -P "$postmaster" | paste -sd ' ')
[ -n "$children" ] || fail "postmaster $postmaster has no children"
kill -9 "$postmaster"
# The orphaned backends notice the postmaster's death and exit; uipc run reaps them.
for p in $postmaster $children; do
    for _ in $(seq 200); do kill -0 "$p" 2> /dev/null || break; sleep 0.05; done
    kill -0 "$p" 2> /dev/null && fail "process $p of the killed server still exists"
done
step restart "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 start
grep -q "database system was interrupted" "$log" || fail "the restart did not recover"
step query "$bin/psql" -h "$sock" -At -c "select count(*) from pgbench_accounts" postgres
[ "$(cat "$dir/step.log")" = 100000 ] || fail "pgbench_accounts after recovery: $(cat "$dir/step.log")"
step stop "$bin/pg_ctl" -D "$data" -w -t 30 stop -m fast
echo "postgres ($mode): pgbench, kill -9 of the postmaster, restart recovered"
EOF

timeout 110 unshare --ipc bash -c '
    set -euo pipefail
    work=$1 bin=$2
    cd "$work"
    ./uipc run -- su postgres -s /bin/bash -c \
        "bash $work/cycle.sh default $bin $work/pg && bash $work/cycle.sh sysv $bin $work/pg"
    left=$(LD_PRELOAD= tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg)
    if [ -n "$left" ]; then
        echo "test-postgres: kernel SysV objects in the namespace: $left" >&2
        exit 1
    fi
' _ "$work" "$bindir"
echo "postgres under uipc run: ok (default and sysv shared memory, no kernel SysV object)"
