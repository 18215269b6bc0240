#!/usr/bin/env bash
# `uipc run` end to end: builds the C test programs in tests/c, runs each one on the host
# kernel (the oracle: the tests pin down Linux's behaviour) and then under `uipc run`, and
# finally checks that the uipc runs created no kernel SysV object.
#
# As root every run gets a fresh IPC namespace (`unshare --ipc`), so other users of the host's
# SysV IPC cannot disturb the check; without root the check compares /proc/sysvipc before and
# after instead.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p uipc-cli -p uipc-preload
uipc=./target/release/uipc
out=target/c-tests
mkdir -p "$out"
for src in tests/c/*.c; do
    cc -O1 -Wall -Wextra -Werror -pthread -o "$out/$(basename "$src" .c)" "$src"
done

# How many calls the fast paths served in one run: the sum of the "uipc fastpath: N calls"
# lines its processes printed (UIPC_FASTPATH_STATS=1) into FILE; -1 if none printed one.
fast_calls() {
    awk '/^uipc fastpath: [0-9]+ calls$/ { n += $3; seen = 1 } END { print seen ? n : -1 }' "$1"
}
# `count_served TEST WHAT CMD...`: runs CMD with the statistics on; fails, showing CMD's
# standard error, if CMD fails or the fast paths' count N fails `[ N TEST ]`.
count_served() {
    local test=$1 what=$2 err n rc=0
    shift 2
    err=$(mktemp)
    UIPC_FASTPATH_STATS=1 "$@" 2> "$err" || rc=$?
    n=$(fast_calls "$err")
    # shellcheck disable=SC2086 # TEST is an operator and its operand
    if [ "$rc" -eq 0 ] && [ "$n" $test ]; then
        rm -f "$err"
        return 0
    fi
    cat "$err" >&2
    rm -f "$err"
    [ "$rc" -eq 0 ] || return "$rc"
    echo "$what: the fast paths served $n calls" >&2
    return 1
}
# `expect_served MIN WHAT CMD...`: the fast paths served at least MIN calls of CMD.
expect_served() { count_served "-ge $1" "$2 (at least $1 expected)" "${@:3}"; }
# `expect_none CMD...`: CMD's processes reported and the fast paths served nothing (switched
# off by UIPC_FASTPATH=0 or by the daemon).
expect_none() { count_served "-eq 0" "$* (none expected)" "$@"; }
export -f fast_calls count_served expect_served expect_none

# Two programs under two `uipc run --socket S` meet through keys on one `uipc serve` daemon.
shared_daemon() {
    local uipc=$1 out=$2 dir
    dir=$(mktemp -d)
    "$uipc" serve --socket "$dir/socket" &
    local daemon=$!
    for _ in $(seq 200); do [ -S "$dir/socket" ] && break; sleep 0.05; done
    timeout 60 "$uipc" run --socket "$dir/socket" -- "$out/key_peer" wait &
    local waiter=$!
    timeout 60 "$uipc" run --socket "$dir/socket" -- "$out/key_peer" post
    wait "$waiter"
    # A `uipc serve` daemon keeps every semaphore on the daemon path (no fast path).
    expect_none timeout 60 "$uipc" run --socket "$dir/socket" -- "$out/sem_fast"
    kill "$daemon"
    wait "$daemon" || true
    rm -rf "$dir"
}
export -f shared_daemon

tests=(msg_sem_exchange sem_undo_kill shm_share shm_stat shm_remap shm_rdonly_segv semop_eintr threads_block
    calls_errno perm_setuid ids_cached eintr_storm exec_rules cancel_thread closefrom syscall_ipc timers
    timer_ids_exec timer_overrun timer_ignored vfork_spawn unseen_children handler_ipc ipc_no_malloc handler_altstack
    timer_handler signal_kinds shm_munmap
    timer_no_malloc undo_after_reap "load 64 100" sem_fast "sem_fast_chaos 1500"
    "sem_fast_chaos 2000 undo" key_fast sem_sleep msg_fast "msg_fast_chaos 1500" msg_sleep fd_limit low_fds)
# Linux's process model (privilege drops, exec, orphans, /proc views, IPC and pid namespaces):
# run under uipc run --locks --timers.
process_tests=(priv_drop ident_per_call orphan_reap exec_env_keep proc_sysctl ipc_ns pid_ns userns_ipc)
export PROCESS_TESTS="${process_tests[*]}"

# File locks: each program on the host kernel, then under `uipc run --locks`; the locks taken
# under uipc are not in the host's /proc/locks, and `uipc locks` lists what lslocks lists on
# the host (lslocks shows no OFD locks: that line is checked on its own).
lock_tests=(locks_posix locks_ofd_flock locks_lifetime locks_release locks_handler locks_no_malloc locks_delayed_deadlock
    exec_cloexec_locks exec_hold_flock locks_fdinfo locks_fd_numbers locks_reuse_threads)
echo "-- file locks: on the host kernel, then under uipc run --locks"
# Lists $HOLDER's locks with the lister given, its pid and path made comparable.
printf '%s\n' '#!/bin/sh' \
    '"$@" -n -p "$HOLDER" | sed "s/$HOLDER/PID/g" | awk '"'"'{$1=$1};1'"'"' | sort' \
    > "$out/list-locks.sh"
chmod +x "$out/list-locks.sh"
for t in "${lock_tests[@]}"; do timeout 60 "$out/$t"; done
timeout 30 "$out/locks_visible" kernel "$out/list-locks.sh lslocks > $out/locks-host.txt"
for t in "${lock_tests[@]}"; do timeout 120 "$uipc" run --locks -- "$out/$t"; done
# Differential runs: the same random lock calls of three processes (seed 34 once closed an
# O_PATH descriptor of a locked file) on the host kernel and under uipc run --locks, with the
# fast paths and without; the outputs must be identical.
for seed in 1 2 34; do
    timeout 60 "$out/diff_locks" "$seed" 4000 > "$out/diff-locks-host-$seed.txt"
    timeout 120 "$uipc" run --locks -- "$out/diff_locks" "$seed" 4000 > "$out/diff-locks-uipc-$seed.txt"
    diff -u "$out/diff-locks-host-$seed.txt" "$out/diff-locks-uipc-$seed.txt"
    UIPC_FASTPATH=0 timeout 120 "$uipc" run --locks -- "$out/diff_locks" "$seed" 4000 \
        > "$out/diff-locks-slow-$seed.txt"
    diff -u "$out/diff-locks-host-$seed.txt" "$out/diff-locks-slow-$seed.txt"
done
echo "diff_locks: 3 x 4000 calls, no divergence"
# An exec's close-on-exec descriptors with the lock fast paths (leases) off too.
UIPC_FASTPATH=0 timeout 120 "$uipc" run --locks -- "$out/exec_cloexec_locks"
UIPC_FASTPATH=0 timeout 120 "$uipc" run --locks -- "$out/exec_hold_flock"
# Leases: POSIX locks of a process that alone locks a file, set in the process (chaos rounds
# stop and kill holders inside their calls); on the host, under uipc run --locks (where the
# lease path must have served calls) and with it switched off.
timeout 120 "$out/locks_lease" 300
expect_served 500 leases timeout 300 "$uipc" run --locks -- "$out/locks_lease" 1000
UIPC_FASTPATH=0 expect_none timeout 300 "$uipc" run --locks -- "$out/locks_lease" 100
# Whole-file write locks of many processes on one file (lockperf's posix01), with F_GETLK,
# EDEADLK, a delayed deadlock, EINTR and SA_RESTART, a SIGKILL storm, fork, close and exec:
# on the host, under uipc run --locks, and with the fast paths switched off.
timeout 120 "$out/posix_contend" 32 200
expect_served 500 "shared mode" timeout 300 "$uipc" run --locks -- "$out/posix_contend" 32 200
UIPC_FASTPATH=0 timeout 300 "$uipc" run --locks -- "$out/posix_contend" 16 100
# flock leases: flock of a description that alone locks a file, in the caller's process
# (a SIGKILL storm of holders and waiters, a chaos run killing a lone holder); on the host,
# under uipc run --locks (where the lease must have served calls) and with it switched off.
timeout 120 "$out/flock_fast" 200
expect_served 5000 "flock leases" timeout 300 "$uipc" run --locks -- "$out/flock_fast" 200
UIPC_FASTPATH=0 expect_none timeout 300 "$uipc" run --locks -- "$out/flock_fast" 50
# A process's first lock call, which opens its session (whose Hello brings the lock area,
# with the call right behind it): conflicts, F_GETLK, bad descriptors, a blocking first call;
# on the host, under uipc run --locks, and with the fast paths off.
timeout 60 "$out/first_lock_call"
timeout 60 "$uipc" run --locks -- "$out/first_lock_call"
UIPC_FASTPATH=0 timeout 60 "$uipc" run --locks -- "$out/first_lock_call"
# Without --locks the library passes lock calls to the kernel.
timeout 30 "$uipc" run -- "$out/locks_visible" kernel
timeout 30 "$uipc" run --locks -- "$out/locks_visible" uipc \
    "$out/list-locks.sh $(realpath "$uipc") locks > $out/locks-uipc.txt"
grep -qx 'locks_visible PID OFDLCK 10B READ 0 6 0 /tmp/uipc-locks-visible-PID' "$out/locks-uipc.txt"
diff -u "$out/locks-host.txt" <(grep -v OFDLCK "$out/locks-uipc.txt")
# Under --locks /proc/locks shows uipc's locks: util-linux lslocks, unchanged, lists them.
timeout 30 "$uipc" run --locks -- "$out/locks_visible" uipc \
    "$out/list-locks.sh lslocks > $out/lslocks-uipc.txt"
diff -u "$out/locks-host.txt" "$out/lslocks-uipc.txt"
# Locks through syscall(SYS_fcntl / SYS_flock) and closes through syscall(SYS_close, ...):
# the kernel's without --locks, the daemon's with it (listed by `uipc locks`).
timeout 60 "$out/locks_syscall" kernel
timeout 60 "$uipc" run -- "$out/locks_syscall" kernel
timeout 60 "$uipc" run --locks -- "$out/locks_syscall" uipc \
    "test \"\$($(realpath "$uipc") locks -n -p \$HOLDER | awk '{print \$3}' | sort | paste -sd' ')\" = 'FLOCK OFDLCK POSIX POSIX'"
echo "file locks: ok (none in the host's /proc/locks under uipc; uipc locks = lslocks)"

if [ "$(id -u)" = 0 ]; then
    echo "-- on the host kernel (each in a private IPC namespace)"
    for t in "${tests[@]}"; do
        # shellcheck disable=SC2086 # a test may carry arguments
        timeout 300 unshare --ipc $out/$t
    done
    # Linux's process model: each on the host kernel here, under uipc run --locks --timers below.
    for t in "${process_tests[@]}"; do timeout 60 unshare --ipc "$out/$t"; done
    # Images the loader will not preload into: a static copy of exec_image, a set-user-ID one
    # (owner nobody: its exec changes root's euid) and a static one without execute permission.
    # Under uipc run every child that execs one says so once on stderr; the host says nothing.
    cc -O1 -Wall -Wextra -Werror -static -o "$out/exec_image_static" tests/c/exec_image.c
    install -m 4755 -o 65534 "$out/exec_image" "$out/exec_image_setuid"
    install -m 0644 "$out/exec_image_static" "$out/exec_image_noexec"
    images=("$out/exec_image_static" "$out/exec_image_setuid" "$out/exec_image_noexec")
    timeout 60 "$out/exec_image" exec "${images[@]}" > "$out/exec-image-host.txt" 2> "$out/exec-image-host.err"
    timeout 60 "$uipc" run -- "$out/exec_image" exec "${images[@]}" \
        > "$out/exec-image-uipc.txt" 2> "$out/exec-image-uipc.err"
    [ ! -s "$out/exec-image-host.err" ] && [ "$(grep -c . "$out/exec-image-host.txt")" = 9 ]
    diff -u "$out/exec-image-host.txt" "$out/exec-image-uipc.txt"
    [ "$(grep -c "exec_image_static is statically linked" "$out/exec-image-uipc.err")" = 4 ]
    [ "$(grep -c "exec_image_setuid is set-user-ID" "$out/exec-image-uipc.err")" = 4 ]
    [ "$(grep -c "exec_image_noexec is statically linked" "$out/exec-image-uipc.err")" = 1 ]
    # (uipc run's own warning that the library is closed to other users, in a clone under a
    # private directory, is not one of the exec reports.)
    [ "$(grep -v "runs without uipc; install" "$out/exec-image-uipc.err" | grep -c .)" = 9 ]
    echo "exec_image: static and set-user-ID images reported once per process under uipc run"
    echo "-- under uipc run (one private IPC namespace, checked afterwards)"
    # Children that switch to nobody (priv_drop, su, setpriv) must still reach the library and
    # the programs: the block runs copies in a directory anyone may traverse, as a clone
    # under `mktemp -d` is not.
    reach=$(mktemp -d)
    chmod 755 "$reach"
    cp "$uipc" target/release/libuipc_preload.so "$reach/"
    cp -r "$out" "$reach/c-tests"
    timeout 1200 unshare --ipc bash -c '
        set -euo pipefail
        uipc=$1 out=$2; shift 2
        for t in "$@"; do timeout 300 "$uipc" run -- $out/$t; done
        # The semaphore fast path: the same programs with it switched off; with it on it must
        # have served calls; under a `uipc serve` daemon it is off.
        UIPC_FASTPATH=0 timeout 60 "$uipc" run -- "$out/sem_fast"
        UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/sem_fast_chaos" 500
        UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/sem_fast_chaos" 500 undo
        UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/sem_sleep"
        expect_served 2000 sem_fast timeout 60 "$uipc" run -- "$out/sem_fast"
        UIPC_FASTPATH=0 expect_none timeout 60 "$uipc" run -- "$out/sem_fast"
        # Opens of existing keys answered from the key table (3000 in the loops of key_fast).
        expect_served 3000 "key table" timeout 60 "$uipc" run -- "$out/key_fast"
        UIPC_FASTPATH=0 timeout 60 "$uipc" run -- "$out/key_fast"
        # Message queue calls served in the process (msg_fast makes over 2000 in its loops).
        UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/msg_fast"
        UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/msg_fast_chaos" 300
        expect_served 2000 msg_fast timeout 120 "$uipc" run -- "$out/msg_fast"
        # msgrcv sleeping on the message fast path: the ping-pong alone makes 40000 calls in the
        # parent, which must nearly all be served there (its receives sleep there).
        UIPC_FASTPATH=0 timeout 300 "$uipc" run -- "$out/msg_sleep"
        expect_served 38000 msg_sleep timeout 300 "$uipc" run -- "$out/msg_sleep"
        # The cancel race alone, 100 rounds: each message received once or left queued.
        timeout 300 "$uipc" run -- "$out/msg_sleep" race 100 | uniq -c
        for t in $PROCESS_TESTS; do timeout 60 "$uipc" run --locks --timers -- "$out/$t"; done
        # A root program whose children switch uid stay clients (su, setpriv) ...
        "$uipc" run -- sh -c "su nobody -s /bin/sh -c \"ipcmk -M 100\" &&
            setpriv --reuid=65534 --regid=65534 --clear-groups ipcmk -S 1 &&
            \"$uipc\" ipcs -m | grep -q \"nobody *644 *100\" && \"$uipc\" ipcs -s | grep -q nobody"
        # ... while another user outside the program cannot reach its private daemon.
        sockfile=$(mktemp)
        "$uipc" run -- sh -c "echo \$UIPC_SOCKET > $sockfile; sleep 3" &
        runner=$!
        for _ in $(seq 100); do [ -s "$sockfile" ] && break; sleep 0.05; done
        if setpriv --reuid=65534 --regid=65534 --clear-groups \
            "$uipc" ipcs --socket "$(cat "$sockfile")" 2>/dev/null; then
            echo "another user reached a private daemon" >&2
            exit 1
        fi
        wait "$runner"
        rm -f "$sockfile"
        # POSIX timers served in the process; timers checks /proc/self/timers stays empty.
        timeout 60 "$uipc" run --timers -- "$out/timers"
        # Differential: random timer calls (valid and invalid), on the host and under --timers.
        for seed in 1 2 3; do
            "$out/diff_timers" "$seed" 2000 > "$out/diff-timers-host-$seed.txt"
            timeout 60 "$uipc" run --timers -- "$out/diff_timers" "$seed" 2000 \
                > "$out/diff-timers-uipc-$seed.txt"
            diff -u "$out/diff-timers-host-$seed.txt" "$out/diff-timers-uipc-$seed.txt"
        done
        # settime, gettime and getoverrun from a timer handler: no deadlock, no malloc.
        timeout 60 "$uipc" run --timers -- "$out/timer_handler"
        timeout 60 "$uipc" run --timers -- "$out/timer_no_malloc"
        # Handlers installed by signal, sysv_signal, sigset and sigaction behind the trampoline
        # that holds signals off during timer calls: their semantics, and no signal lost.
        timeout 60 "$uipc" run --timers -- "$out/signal_kinds"
        # Overruns fixed at the dequeue: unblocking, sigwaitinfo, at 1 ns, 1 us and 1 ms.
        timeout 120 "$uipc" run --timers -- "$out/timer_overrun"
        # Ignored signals park their timer (no CPU time); signals of deleted timers never arrive.
        timeout 60 "$uipc" run --timers -- "$out/timer_ignored"
        # The id counter carried across exec by every exec function, as Linux keeps it.
        timeout 60 "$uipc" run --timers -- "$out/timer_ids_exec"
        # vfork / posix_spawn / raw fork children with file locks and timers routed too.
        timeout 60 "$uipc" run --locks --timers -- "$out/vfork_spawn"
        shared_daemon "$uipc" "$out"
        # A daemon killed under its client: ECONNREFUSED, said once on stderr; its socket file
        # stays, and uipc run --socket refuses it unless told --restart.
        gone=$(mktemp -d)
        "$uipc" serve --socket "$gone/socket" &
        daemon=$!
        for _ in $(seq 200); do [ -S "$gone/socket" ] && break; sleep 0.05; done
        timeout 60 "$uipc" run --socket "$gone/socket" -- "$out/daemon_gone" "$daemon" 2> "$gone/err"
        wait "$daemon" || true
        [ "$(grep -c "does not answer" "$gone/err")" = 1 ]
        if "$uipc" run --socket "$gone/socket" -- true 2> "$gone/err"; then
            echo "uipc run started an empty daemon in place of a dead one" >&2
            exit 1
        fi
        grep -q -- --restart "$gone/err"
        "$uipc" run --socket "$gone/socket" --restart -- "$out/msg_sem_exchange"
        rm -rf "$gone"
        # The daemon outlives the program while a descendant still runs (uipc run reaps
        # orphans); the exit status is that of the program.
        marker=$(mktemp -u)
        set +e
        "$uipc" run -- sh -c "(sleep 0.3; \"$out/msg_sem_exchange\" && touch $marker) & exit 7"
        rc=$?
        set -e
        [ "$rc" = 7 ] && [ -e "$marker" ] && rm -f "$marker"
        # A uipc run inside another joins its daemon: the two programs meet by key.
        "$uipc" run -- sh -c "\"$out/key_peer\" wait & \"$uipc\" run -- \"$out/key_peer\" post && wait \$!"
        # Differential: random calls of four processes running as different users (root, two
        # users sharing a group, nobody) on shared objects (permissions, owners, capabilities,
        # undo at exit, exec), on the host (a namespace of its own) and under uipc run.
        for seed in 1 2 3; do
            timeout 60 unshare --ipc "$out/diff_ipc_users" "$seed" 3000 > "$out/users-host-$seed.txt"
            timeout 120 "$uipc" run -- "$out/diff_ipc_users" "$seed" 3000 > "$out/users-uipc-$seed.txt"
            diff -u "$out/users-host-$seed.txt" "$out/users-uipc-$seed.txt"
        done
        echo "diff_ipc_users: 3 x 3000 calls, no divergence"
        "$out/kernel_probe"
    ' _ "$reach/uipc" "$reach/c-tests" "${tests[@]}"
    rm -rf "$reach"
    timeout 60 "$out/daemon_gone"
    echo "-- differential runs: random calls on the host kernel and under uipc run, same output"
    for seed in 1 2 3; do
        timeout 60 unshare --ipc "$out/diff_ops" "$seed" 3000 > "$out/diff-host-$seed.txt"
        timeout 120 "$uipc" run -- "$out/diff_ops" "$seed" 3000 > "$out/diff-uipc-$seed.txt"
        diff -u "$out/diff-host-$seed.txt" "$out/diff-uipc-$seed.txt"
    done
    echo "diff_ops: 3 x 3000 calls, no divergence"
    # Random writes to the IPC sysctls, each read back and followed by a call they decide.
    for seed in 1 2 3; do
        timeout 60 unshare --ipc "$out/diff_sysctl" "$seed" 400 > "$out/sysctl-host-$seed.txt"
        timeout 120 "$uipc" run -- "$out/diff_sysctl" "$seed" 400 > "$out/sysctl-uipc-$seed.txt"
        diff -u "$out/sysctl-host-$seed.txt" "$out/sysctl-uipc-$seed.txt"
    done
    echo "diff_sysctl: 3 x 400 writes, no divergence"
    # Calls that sleep, woken by others, signals, kills and removals: who gets what.
    for seed in 1 2; do
        timeout 120 unshare --ipc "$out/diff_sleepers" "$seed" 200 > "$out/sleepers-host-$seed.txt"
        timeout 120 "$uipc" run -- "$out/diff_sleepers" "$seed" 200 > "$out/sleepers-uipc-$seed.txt"
        diff -u "$out/sleepers-host-$seed.txt" "$out/sleepers-uipc-$seed.txt"
    done
    UIPC_FASTPATH=0 timeout 120 "$uipc" run -- "$out/diff_sleepers" 1 200 > "$out/sleepers-slow.txt"
    diff -u "$out/sleepers-host-1.txt" "$out/sleepers-slow.txt"
    echo "diff_sleepers: 3 x 200 actions, no divergence"
    echo "-- uipc ipcs / ipcrm against util-linux ipcs / ipcrm (same objects, same output)"
    script='P; P -q; P -m -s; R -Q 0x99 -s 1; echo rc=$?; R -M 0x7777; echo rc=$?; P; R -a; echo rc=$?; P'
    native=${script//P/ipcs}
    native=${native//R/ipcrm}
    # The uipc binary goes in through the environment: its path may hold a P or an R (a
    # mktemp directory's name), which the second substitution would replace.
    UBIN=$(realpath "$uipc")
    export UBIN
    under=${script//P/\"\$UBIN\" ipcs}
    under=${under//R/\"\$UBIN\" ipcrm}
    timeout 60 unshare --ipc "$out/ipcs_fixture" "$native" > "$out/ipcs-host.txt" 2>/dev/null
    timeout 60 "$uipc" run -- "$out/ipcs_fixture" "$under" > "$out/ipcs-uipc.txt" 2>/dev/null
    diff -u "$out/ipcs-host.txt" "$out/ipcs-uipc.txt"
    # Every other option of util-linux's ipcs, and combinations, stderr and exit status included.
    opts=("-c" "-p" "-t" "-l" "-u" "-b" "--human" "-q -c" "-m -p" "-s -t" "-a -u" "-m -s -l"
        "-l -b" "-l --human" "-q -l --human" "-u -b" "-u --human" "-m --human" "-q -b" "-p -c"
        "-c -t" "-b --human" "--human -b" "-q -i 0" "-q -i 0 --human" "-q -i 1 -b" "-m -i 0"
        "-m -i 1 -b" "-m -i 0 --human" "-m -i 1 -t" "-s -i 0" "-s -i 1" "-s -i 99" "-q -i 7"
        "-i 0" "-q -s -i 0" "-a -i 0")
    each=''
    for o in "${opts[@]}"; do each+="echo '## $o'; P $o; echo rc=\$?; "; done
    # Normalised, and only these: times (the two runs happen at different moments; their
    # columns keep their width) and the fixture's pid with the blanks around it (pids differ
    # between the runs, and so may their digit counts, which move the padding).
    norm='sed -E -e "s/[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}/TIME/g"'
    norm+=' -e "s/[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} /TIME /g"'
    norm+=' -e "s/ *\<$FIXTURE_PID\> */ PID /g"'
    native="( ${each//P/ipcs} ) 2>&1 | $norm"
    # The one other difference: the program's name in its error messages.
    under="( ${each//P/\"\$UBIN\" ipcs} ) 2>&1 | sed -e 's/^uipc ipcs: /ipcs: /' | $norm"
    timeout 60 unshare --ipc "$out/ipcs_fixture" "$native" > "$out/ipcs-opts-host.txt"
    timeout 60 "$uipc" run -- "$out/ipcs_fixture" "$under" > "$out/ipcs-opts-uipc.txt"
    diff -u "$out/ipcs-opts-host.txt" "$out/ipcs-opts-uipc.txt"
    echo "ipcs/ipcrm: same output as util-linux (default format, ${#opts[@]} other option sets)"
    echo "-- /proc views: /proc/sysvipc, util-linux ipcs and lsipc, unchanged, inside uipc run"
    # The same objects on the host (private IPC namespace) and under uipc run; the creator's
    # pid and the times are made comparable.
    views='{ cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem; ipcs; ipcs -l; ipcs -u;
        ipcs -c; ipcs -p; ipcs -t; ipcs -m -i 0; lsipc; lsipc -s; lsipc -q; lsipc -m; } 2>&1 |
        sed -e "s/\b$PPID\b/PID/g" -e "s/\b1[7-9][0-9]\{8\}\b/TIME/g" \
            -e "s/[A-Z][a-z][a-z] [ 0-9][0-9] [0-9:]\{8\}/DATE/g" -e "s/[0-9][0-9]:[0-9][0-9]/HH:MM/g"'
    timeout 60 unshare --ipc "$out/ipcs_fixture" "$views" > "$out/views-host.txt"
    timeout 60 "$uipc" run -- "$out/ipcs_fixture" "$views" > "$out/views-uipc.txt"
    grep -q '^0x00004321 0  rw-rw-rw-   root     3$' "$out/views-host.txt"
    diff -u "$out/views-host.txt" "$out/views-uipc.txt"
    echo "/proc views: same output as on the host"

    echo "-- uipc serve --state: stopped and started again, the same objects"
    state_dir=$(mktemp -d)
    abs_out=$(realpath "$out")
    start_serve() {
        "$uipc" serve --socket "$state_dir/socket" --state "$state_dir/state" &
        serve_pid=$!
        for _ in $(seq 200); do [ -S "$state_dir/socket" ] && break; sleep 0.05; done
    }
    start_serve
    timeout 60 "$uipc" run --socket "$state_dir/socket" -- "$abs_out/ipcs_fixture" true
    "$uipc" ipcs --socket "$state_dir/socket" > "$state_dir/before"
    kill -TERM "$serve_pid"
    wait "$serve_pid"
    [ -s "$state_dir/state" ] && [ ! -e "$state_dir/socket" ]
    start_serve
    "$uipc" ipcs --socket "$state_dir/socket" > "$state_dir/after"
    kill -TERM "$serve_pid"
    wait "$serve_pid"
    diff -u "$state_dir/before" "$state_dir/after"
    grep -q locked "$state_dir/after"
    rm -rf "$state_dir"
    echo "state: restored"

    # calls_errno checks that the objects it creates are owned by its euid (nobody here).
    echo "-- uipc serve --shared as root, a client as nobody: judged by its own ids"
    shared_dir=$(mktemp -d)
    cp "$uipc" target/release/libuipc_preload.so "$out/calls_errno" "$out/ident_per_call" \
        "$shared_dir/"
    chmod 755 "$shared_dir"
    "$uipc" serve --shared --socket "$shared_dir/run/socket" &
    serve_pid=$!
    for _ in $(seq 200); do [ -S "$shared_dir/run/socket" ] && break; sleep 0.05; done
    timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$shared_dir/uipc" run --socket "$shared_dir/run/socket" -- "$shared_dir/calls_errno"
    # A user in a user namespace of its own (root there, as after unshare -Ur) has no
    # capability over root's 0600 set: on the host kernel, then on the shared daemon.
    as_nobody='setpriv --reuid=65534 --regid=65534 --clear-groups'
    timeout 60 unshare --ipc sh -c "$shared_dir/ident_per_call make 0x75492020 &&
        $as_nobody $shared_dir/ident_per_call userns 0x75492020"
    "$shared_dir/uipc" run --socket "$shared_dir/run/socket" -- \
        "$shared_dir/ident_per_call" make 0x75492020
    timeout 60 $as_nobody "$shared_dir/uipc" run --socket "$shared_dir/run/socket" -- \
        "$shared_dir/ident_per_call" userns 0x75492020
    kill -TERM "$serve_pid"
    wait "$serve_pid"
    rm -rf "$shared_dir"
    echo "shared daemon: ok"

    echo "-- fakeroot-sysv under uipc run, as nobody: a tarball with root-owned files and a device"
    work=$(mktemp -d)
    cp "$uipc" target/release/libuipc_preload.so "$out/kernel_probe" "$work/"
    chmod 755 "$work"
    chown 65534:65534 "$work"
    (
        cd "$work"
        timeout 120 unshare --ipc bash -c '
            set -euo pipefail
            setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$PWD" XDG_RUNTIME_DIR= \
                ./uipc run -- fakeroot-sysv sh -c "
                    mkdir d && echo hi > d/f && chown 0:0 d && chown 1234:5678 d/f &&
                    mknod d/null c 1 3 && tar czf t.tgz d"
            ./kernel_probe'
    )
    listing=$(tar tvzf "$work/t.tgz")
    echo "$listing"
    grep -q '^drwx.* root/root .* d/$' <<<"$listing"
    grep -q '^-rw-.* 1234/5678 .* d/f$' <<<"$listing"
    grep -q '^crw-.* root/root .*1,3 .* d/null$' <<<"$listing"
    rm -rf "$work"
    echo "fakeroot-sysv: ok"

    echo "-- PostgreSQL under uipc run: pgbench, kill -9 of the postmaster, recovery"
    bash scripts/test-postgres.sh

    echo "-- the Python package sysv_ipc's own test suite under uipc run"
    bash scripts/sysv-ipc-setup.sh
    (
        cd target/sysv_ipc/sysv_ipc-*/
        timeout 300 unshare --ipc bash -c '
            set -euo pipefail
            "$1" run -- ../venv/bin/python -m unittest discover -t . -s tests
            "$2"
        ' _ "$(realpath ../../release/uipc)" "$(realpath ../../c-tests/kernel_probe)"
    )

    echo "-- Perl's SysV modules, other users on one user's objects, X11 MIT-SHM: host, then uipc run"
    # Each prints what it did; the two outputs must be the same. perm_matrix.sh switches to
    # other users (setpriv, su), so everything is copied to a directory anyone may traverse.
    progs=$(mktemp -d)
    chmod 755 "$progs"
    out_abs=$(realpath "$out")
    cp tests/programs/* "$uipc" target/release/libuipc_preload.so "$out/kernel_probe" "$progs/"
    for prog in "perl perl_sysv.pl" "bash perm_matrix.sh" "bash x11_shm.sh"; do
        name=${prog#* }
        # shellcheck disable=SC2086 # the interpreter and the script
        (cd "$progs" && timeout 120 unshare --ipc $prog) > "$out_abs/$name-host.txt" 2>&1
        (cd "$progs" && timeout 120 unshare --ipc bash -c \
            './uipc run -- "$@" > "$0" 2>&1 && ./kernel_probe' "$out_abs/$name-uipc.txt" $prog)
        diff -u "$out/$name-host.txt" "$out/$name-uipc.txt"
    done
    grep -q '^ran: ShmGetImage' "$out/x11_shm.sh-host.txt"
    grep -q '^msgrcv 42$' "$out/perm_matrix.sh-host.txt"
    rm -rf "$progs"
    echo "Perl, other users, X11 MIT-SHM: same results as on the host"
else
    echo "-- under uipc run (not root: /proc/sysvipc compared before and after)"
    before=$(cat /proc/sysvipc/sem /proc/sysvipc/msg /proc/sysvipc/shm)
    for t in "${tests[@]}"; do
        # shellcheck disable=SC2086 # a test may carry arguments
        timeout 60 "$uipc" run -- $out/$t
    done
    timeout 60 "$uipc" run --timers -- "$out/timers"
    timeout 60 "$uipc" run --timers -- "$out/timer_ids_exec"
    timeout 60 "$uipc" run --locks --timers -- "$out/vfork_spawn"
    for t in "${process_tests[@]}"; do timeout 60 "$uipc" run --locks --timers -- "$out/$t"; done
    shared_daemon "$uipc" "$out"
    after=$(cat /proc/sysvipc/sem /proc/sysvipc/msg /proc/sysvipc/shm)
    if [ "$before" != "$after" ]; then
        echo "kernel SysV objects changed during the uipc runs" >&2
        exit 1
    fi
fi
echo "-- scripts/install.sh into a temporary prefix: PREFIX/bin/uipc finds PREFIX/lib/uipc"
prefix=$(mktemp -d)
bash scripts/install.sh --prefix "$prefix" > /dev/null
[ ! -e "$prefix/bin/libuipc_preload.so" ] && [ -f "$prefix/lib/uipc/libuipc_preload.so" ]
(
    cd /
    if [ "$(id -u)" = 0 ]; then
        # ipcs lists uipc's queue; the kernel's file, read without the library, stays empty.
        timeout 60 unshare --ipc "$prefix/bin/uipc" run -- sh -c \
            'ipcmk -Q && ipcs -q && test -z "$(LD_PRELOAD= tail -n +2 /proc/sysvipc/msg)"'
    else
        timeout 60 "$prefix/bin/uipc" run -- ipcmk -Q
    fi
) | tee "$out/install-run.txt"
grep -q '^Message queue id: 0$' "$out/install-run.txt"
rm -rf "$prefix"
echo "install: ok"
echo "uipc run: all C tests passed"
