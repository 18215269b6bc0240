#!/usr/bin/env bash
# Objects of one user (uid 4000, group 4242: a 0640 queue, a 0604 set, a 0660 segment) used
# by others that a root program switches to with setpriv and su: another user, one holding
# the group as a supplementary or as its primary group, root without CAP_IPC_OWNER, a user
# given CAP_IPC_OWNER or CAP_SYS_ADMIN as ambient capabilities. Prints what each may do
# (perl_ipc_access.pl beside this script), for the host and `uipc run` to be compared. Root.
set -u
cd "$(dirname "$0")"
owner="setpriv --reuid=4000 --regid=4242 --clear-groups"
$owner ipcmk -Q -p 0640 > /dev/null
$owner ipcmk -S 2 -p 0604 > /dev/null
$owner ipcmk -M 4096 -p 0660 > /dev/null
users=("setpriv --reuid=65534 --regid=65534 --clear-groups"
    "setpriv --reuid=65534 --regid=65534 --groups=4242"
    "setpriv --reuid=65534 --regid=4242 --clear-groups"
    "setpriv --inh-caps=-all --bounding-set=-ipc_owner"
    "setpriv --bounding-set=-dac_override"
    "setpriv --reuid=4000 --regid=4000 --clear-groups"
    "setpriv --reuid=5000 --regid=5000 --clear-groups --inh-caps=+ipc_owner --ambient-caps=+ipc_owner")
for who in "${users[@]}"; do
    echo "== $who"
    $who perl perl_ipc_access.pl 2>&1 || echo "exit status $?"
done
echo "== su nobody"
su nobody -s /bin/sh -c "perl $PWD/perl_ipc_access.pl" 2>&1
echo "== nobody removes"
RM=1 setpriv --reuid=65534 --regid=65534 --clear-groups perl perl_ipc_access.pl
echo "== CAP_SYS_ADMIN removes"
RM=1 setpriv --reuid=5000 --regid=5000 --clear-groups --inh-caps=+sys_admin \
    --ambient-caps=+sys_admin perl perl_ipc_access.pl
ipcs | awk 'NF { $1 = ""; print }'
