#!/usr/bin/perl
# What the calling user may do with the objects of id 0 (a queue, a set, a segment made by
# perm_matrix.sh): each call's result ("ok" or the errno), for the host and `uipc run` to be
# compared. With RM=1 it also tries to remove the segment and the queue.
use strict;
use warnings;
use IPC::SysV qw(IPC_STAT IPC_NOWAIT IPC_RMID GETVAL SETVAL);
$| = 1;
my ($b, $v);
sub res { print "$_[0] ", ($_[1] ? "ok" : $! + 0), "\n" }
print "ids $< $> ", join(",", sort split / /, $)), "\n";
res "msgsnd", msgsnd(0, pack("l! a*", 1, "x"), IPC_NOWAIT);
res "msgrcv", msgrcv(0, $b, 10, 0, IPC_NOWAIT);
res "msgctl IPC_STAT", msgctl(0, IPC_STAT, $b);
res "semctl GETVAL", defined semctl(0, 0, GETVAL, 0);
res "semctl SETVAL", semctl(0, 0, SETVAL, 1);
res "semop", semop(0, pack("s!3", 0, 1, IPC_NOWAIT));
res "shmread", shmread(0, $v, 0, 4);
res "shmwrite", shmwrite(0, "ab", 0, 2);
if ($ENV{RM}) {
    res "shmctl IPC_RMID", shmctl(0, IPC_RMID, 0);
    res "msgctl IPC_RMID", msgctl(0, IPC_RMID, 0);
}
