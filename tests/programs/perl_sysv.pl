#!/usr/bin/perl
# Perl's SysV IPC modules (IPC::SysV, IPC::Msg, IPC::Semaphore, IPC::SharedMem, all in Perl's
# core) through a run of their methods, forks included: prints each result and errno, so
# that scripts/test-run.sh can compare a run on the host kernel with one under `uipc run`.
use strict;
use warnings;
use IPC::SysV qw(IPC_PRIVATE IPC_CREAT IPC_EXCL IPC_NOWAIT IPC_STAT S_IRUSR S_IWUSR SEM_UNDO
    ftok shmat shmdt memread memwrite);
use IPC::Msg;
use IPC::Semaphore;
use IPC::SharedMem;
$| = 1;

sub show { print join(" ", @_), "\n" }
sub err { defined $_[0] && $_[0] ? "ok" : $! + 0 }

# Message queues: a keyed queue, typed receives, a receive sleeping in a child, IPC_SET.
my $key = ftok("/", 7);
my $q = IPC::Msg->new($key, IPC_CREAT | IPC_EXCL | 0640) or die "msgget: $!";
show "msg excl", err(IPC::Msg->new($key, IPC_CREAT | IPC_EXCL | 0640));
$q->snd(1, "hello") or die;
$q->snd(2, "world") or die;
my $st = $q->stat;
show "qnum", $st->qnum, "qbytes", $st->qbytes, "mode", sprintf("%o", $st->mode & 0777);
my $buf;
$q->rcv($buf, 100, 2) or die;
show "rcv type 2", $buf;
show "rcv type 3 nowait", err($q->rcv($buf, 100, 3, IPC_NOWAIT));
show "rcv too short", err($q->rcv($buf, 2, 1, 0));
$st->mode(0600);
$q->set($st) or die "set: $!";
show "mode now", sprintf("%o", $q->stat->mode & 0777);
my $pid = fork // die;
if (!$pid) {
    my $b;
    $q->rcv($b, 100, 9) or exit 3;
    exit($b eq "for the child" ? 0 : 4);
}
select undef, undef, undef, 0.1;
$q->snd(9, "for the child") or die;
waitpid $pid, 0;
show "child received", $? >> 8;
$q->remove or die;
show "stat after remove", err($q->stat);

# Semaphores: setall/getall, multi-sop operations, SEM_UNDO of an exiting child, a sleeper.
my $s = IPC::Semaphore->new(IPC_PRIVATE, 3, S_IRUSR | S_IWUSR | IPC_CREAT) or die "semget: $!";
$s->setall(1, 2, 3) or die;
show "all", join(",", $s->getall);
$s->op(0, -1, 0, 1, 1, 0) or die;
show "all", join(",", $s->getall);
show "op nowait", err($s->op(0, -1, IPC_NOWAIT));
$s->setval(2, 7);
show "val2", $s->getval(2), "ncnt", $s->getncnt(0), "zcnt", $s->getzcnt(0);
$pid = fork // die;
if (!$pid) { $s->op(0, 1, SEM_UNDO) or exit 3; exit 0 }
waitpid $pid, 0;
show "undo child", $? >> 8, "val0", $s->getval(0);
$pid = fork // die;
if (!$pid) { $s->op(0, -1, 0) or exit 3; exit 0 }
my $waited = 0;
while ($s->getncnt(0) != 1 && $waited++ < 500) { select undef, undef, undef, 0.01 }
show "ncnt", $s->getncnt(0);
$s->op(0, 1, 0);
waitpid $pid, 0;
show "sleeper", $? >> 8, "val0", $s->getval(0), "its pid", ($s->getpid(0) == $pid ? 1 : 0);
my $ss = $s->stat;
show "nsems", $ss->nsems, "mode", sprintf("%o", $ss->mode & 0777);
$s->remove;
show "getval after remove", err($s->getval(0));

# Shared memory: read/write without attaching, attach, a child's write, shmat/memread.
my $m = IPC::SharedMem->new(IPC_PRIVATE, 8192, S_IRUSR | S_IWUSR) or die "shmget: $!";
$m->write("perl data", 100, 9) or die;
show "read", $m->read(100, 9);
$m->attach or die "attach: $!";
show "attached read", $m->read(100, 4);
my $ms = $m->stat;
show "segsz", $ms->segsz, "nattch", $ms->nattch;
$pid = fork // die;
if (!$pid) { $m->write("kid", 0, 3); exit 0 }
waitpid $pid, 0;
show "child wrote", $m->read(0, 3);
my $addr = shmat($m->id, undef, 0) // die "shmat: $!";
memwrite($addr, "raw", 200, 3) or die;
my $r;
memread($addr, $r, 200, 3) or die;
show "memread", $r, "nattch", $m->stat->nattch;
show "shmdt", shmdt($addr) // "undef";
$m->detach;
show "nattch", $m->stat->nattch;
$m->remove;
show "stat after remove", err($m->stat);

# Errors: ids that name nothing, a set too large.
show "msgctl of no queue", err(msgctl(0x7ffffff, IPC_STAT, my $x));
show "semget too many", err(semget(IPC_PRIVATE, 100000, 0600));
show "shmat of no segment", err(shmat(0x7ffffff, undef, 0));
