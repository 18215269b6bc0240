#!/usr/bin/env bash
# X11's MIT-SHM extension: an Xvfb server and x11perf's shared-memory image tests
# (XShmPutImage, XShmGetImage), whose client makes a segment, attaches it and hands its id to
# the server, which attaches it too; once as root and once as nobody (the server checks the
# segment's owner and mode against the client's ids). Prints what can be compared between the
# host and `uipc run` (test names and whether each ran), and the segments left (none). Root.
set -euo pipefail
dir=$(mktemp -d)
exec 3> "$dir/display"
Xvfb -displayfd 3 -nolisten tcp -screen 0 1024x768x24 > "$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 200); do [ -s "$dir/display" ] && break; sleep 0.05; done
export DISPLAY=":$(head -n 1 "$dir/display")"
xdpyinfo -queryExtensions | grep -o 'MIT-SHM'
run() {
    "$@" x11perf -repeat 1 -reps 200 -shmput10 -shmget10 2>&1 |
        sed -n -E 's/^ *[0-9]+ reps @ .*\): (.*)$/ran: \1/p; /[Ee]rror/p'
}
run env
run setpriv --reuid=65534 --regid=65534 --clear-groups env
kill "$server"
wait "$server" || true
rm -rf "$dir"
ipcs -m | awk 'NR > 3 && NF'
echo "x11 MIT-SHM: done"
