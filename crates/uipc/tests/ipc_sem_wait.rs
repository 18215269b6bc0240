//! Sleeping semops: who is woken and when, NCNT/ZCNT, EINTR, timeouts, removal.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use uipc::ipc::consts::*;
use uipc::ipc::sem::{Sembuf, SemctlArg, Timespec};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, Errno, Interrupt, WaitCtx};
use uipc_testkit::wait_until as until;

fn root() -> Cred {
    Cred::root(100)
}
fn get(ns: &IpcNamespace, id: i32, n: i32, cmd: i32) -> i32 {
    ns.semctl(&root(), id, n, cmd, SemctlArg::None)
        .unwrap()
        .ret()
}
fn setval(ns: &IpcNamespace, id: i32, n: i32, v: i32) {
    ns.semctl(&root(), id, n, SETVAL, SemctlArg::Val(v))
        .unwrap();
}
fn op(ns: &IpcNamespace, id: i32, sops: &[Sembuf]) -> Result<(), Errno> {
    ns.semop(&root(), id, sops, &WaitCtx::FOREVER)
}

/// Starts a sleeping semop in another thread, interruptible through the returned handle.
fn sleeper(
    ns: &Arc<IpcNamespace>,
    id: i32,
    sops: Vec<Sembuf>,
) -> (JoinHandle<Result<(), Errno>>, Interrupt) {
    let irq = Interrupt::new();
    let (ns, irq2) = (ns.clone(), irq.clone());
    let t = thread::spawn(move || {
        ns.semop(
            &Cred::root(300),
            id,
            &sops,
            &WaitCtx::FOREVER.interruptible(&irq2),
        )
    });
    (t, irq)
}

/// A fresh namespace and a private set of `n` semaphores in it.
fn ns_with_set(n: i32) -> (Arc<IpcNamespace>, i32) {
    let ns = Arc::new(IpcNamespace::new());
    let id = ns.semget(&root(), IPC_PRIVATE, n, 0o600).unwrap();
    (ns, id)
}

#[test]
fn later_small_decrement_passes_an_earlier_large_one_that_cannot_go() {
    let (ns, id) = ns_with_set(1);
    let (big, irq) = sleeper(&ns, id, vec![Sembuf::new(0, -2, 0)]);
    until("-2 queued", || get(&ns, id, 0, GETNCNT) == 1);
    let (small, _) = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0)]);
    until("-1 queued", || get(&ns, id, 0, GETNCNT) == 2);
    op(&ns, id, &[Sembuf::new(0, 1, 0)]).unwrap();
    assert_eq!(small.join().unwrap(), Ok(()));
    assert_eq!(get(&ns, id, 0, GETNCNT), 1, "-2 still waits");
    assert!(!big.is_finished());
    op(&ns, id, &[Sembuf::new(0, 2, 0)]).unwrap();
    assert_eq!(big.join().unwrap(), Ok(()));
    assert_eq!(get(&ns, id, 0, GETVAL), 0);
    drop(irq);
}

#[test]
fn one_increment_completes_every_waiter_it_can_in_arrival_order() {
    let (ns, id) = ns_with_set(1);
    let mut ts = Vec::new();
    for k in 1..=3 {
        ts.push(sleeper(&ns, id, vec![Sembuf::new(0, -1, 0)]).0);
        until("queued", || get(&ns, id, 0, GETNCNT) == k);
    }
    op(&ns, id, &[Sembuf::new(0, 2, 0)]).unwrap();
    until("two completed", || get(&ns, id, 0, GETNCNT) == 1);
    assert_eq!(get(&ns, id, 0, GETVAL), 0);
    let third = ts.pop().unwrap();
    for t in ts {
        assert_eq!(t.join().unwrap(), Ok(()), "the two earliest completed");
    }
    assert!(!third.is_finished(), "the third (latest) one still waits");
    setval(&ns, id, 0, 1);
    assert_eq!(third.join().unwrap(), Ok(()));
}

#[test]
fn zero_waiters_wake_when_the_value_reaches_zero_and_not_before() {
    let (ns, id) = ns_with_set(2);
    setval(&ns, id, 0, 2);
    let (z, _) = sleeper(&ns, id, vec![Sembuf::new(0, 0, 0)]);
    until("zero waiter", || get(&ns, id, 0, GETZCNT) == 1);
    op(&ns, id, &[Sembuf::new(0, -1, 0)]).unwrap();
    // The waker decides under the set's lock: still queued now means it was not woken.
    assert_eq!(
        get(&ns, id, 0, GETZCNT),
        1,
        "value 1 is not zero: still queued"
    );
    op(&ns, id, &[Sembuf::new(0, -1, 0)]).unwrap();
    assert_eq!(z.join().unwrap(), Ok(()));
    assert_eq!(get(&ns, id, 0, GETZCNT), 0);
}

#[test]
fn complex_waiter_completes_when_all_its_sops_can_and_chains_wakeups() {
    let (ns, id) = ns_with_set(3);
    // Takes 1 from sem0 and sem1, gives 1 to sem2; a zero-waiter on sem0 follows it.
    let (c, _) = sleeper(
        &ns,
        id,
        vec![
            Sembuf::new(0, -1, 0),
            Sembuf::new(1, -1, 0),
            Sembuf::new(2, 1, 0),
        ],
    );
    until("complex queued", || get(&ns, id, 0, GETNCNT) == 1);
    let (d, _) = sleeper(&ns, id, vec![Sembuf::new(2, -1, 0)]);
    until("single queued", || get(&ns, id, 2, GETNCNT) == 1);
    op(&ns, id, &[Sembuf::new(0, 1, 0)]).unwrap();
    // sem1 is still 0: the waker's retry left the sleeper queued, now counted on sem1.
    // Host-verified: the retry moves the sleeper's count to the sop that blocks it now.
    assert_eq!(get(&ns, id, 1, GETNCNT), 1, "now counted where it blocks");
    assert_eq!(get(&ns, id, 0, GETNCNT), 0, "and only there");
    op(&ns, id, &[Sembuf::new(1, 1, 0)]).unwrap();
    assert_eq!(c.join().unwrap(), Ok(()));
    assert_eq!(
        d.join().unwrap(),
        Ok(()),
        "the complex op's +1 fed the next"
    );
    assert_eq!(
        ns.semctl(&root(), id, 0, GETALL, SemctlArg::None).unwrap(),
        uipc::ipc::sem::SemctlOut::All(vec![0, 0, 0])
    );
}

#[test]
fn a_sleeper_counts_once_on_the_semaphore_of_its_first_blocking_sop() {
    let (ns, id) = ns_with_set(2);
    setval(&ns, id, 1, 1);
    let (t, irq) = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0), Sembuf::new(1, 0, 0)]);
    until("queued", || get(&ns, id, 0, GETNCNT) == 1);
    assert_eq!(
        get(&ns, id, 1, GETZCNT),
        0,
        "{{0,-1}},{{1,0}} counts in NCNT(0) only"
    );
    assert_eq!(get(&ns, id, 1, GETNCNT), 0);
    irq.raise();
    assert_eq!(t.join().unwrap(), Err(Errno::EINTR));
    assert_eq!(
        get(&ns, id, 0, GETNCNT),
        0,
        "an interrupted sleeper leaves at once"
    );
}

#[test]
fn interrupt_gives_eintr_and_applies_nothing() {
    let (ns, id) = ns_with_set(1);
    let (t, irq) = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0)]);
    until("queued", || get(&ns, id, 0, GETNCNT) == 1);
    irq.raise();
    assert_eq!(t.join().unwrap(), Err(Errno::EINTR));
    assert_eq!(get(&ns, id, 0, GETNCNT), 0);
    op(&ns, id, &[Sembuf::new(0, 1, 0)]).unwrap();
    assert_eq!(
        get(&ns, id, 0, GETVAL),
        1,
        "the interrupted -1 took nothing"
    );
    // Raised before the call: an op that can proceed still succeeds, one that blocks is EINTR.
    let ctx = WaitCtx::FOREVER.interruptible(&irq);
    assert_eq!(
        ns.semop(&root(), id, &[Sembuf::new(0, -1, 0)], &ctx),
        Ok(())
    );
    assert_eq!(
        ns.semop(&root(), id, &[Sembuf::new(0, -1, 0)], &ctx),
        Err(Errno::EINTR)
    );
}

#[test]
fn timeout_gives_eagain_and_drops_the_count() {
    let (ns, id) = ns_with_set(2);
    setval(&ns, id, 1, 1);
    let (ns2, start) = (ns.clone(), Instant::now());
    let t = thread::spawn(move || {
        let to = Timespec {
            tv_sec: 0,
            tv_nsec: 150_000_000,
        };
        let sops = [Sembuf::new(0, 1, 0), Sembuf::new(1, 0, 0)];
        ns2.semtimedop(&root(), id, &sops, Some(to), &WaitCtx::FOREVER)
    });
    until("queued", || {
        get(&ns, id, 1, GETZCNT) == 1 || t.is_finished()
    });
    assert_eq!(t.join().unwrap(), Err(Errno::EAGAIN));
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert_eq!(get(&ns, id, 1, GETZCNT), 0);
    assert_eq!(get(&ns, id, 0, GETVAL), 0, "the +1 was not applied");
    let zero = Some(Timespec::default());
    assert_eq!(
        ns.semtimedop(
            &root(),
            id,
            &[Sembuf::new(1, 0, 0)],
            zero,
            &WaitCtx::FOREVER
        ),
        Err(Errno::EAGAIN)
    );
}

#[test]
fn rmid_wakes_every_sleeper_with_eidrm() {
    let (ns, id) = ns_with_set(2);
    setval(&ns, id, 1, 1);
    let a = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0)]).0;
    let b = sleeper(&ns, id, vec![Sembuf::new(1, 0, 0)]).0;
    let c = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0), Sembuf::new(1, -1, 0)]).0;
    until("three queued", || {
        get(&ns, id, 0, GETNCNT) == 2 && get(&ns, id, 1, GETZCNT) == 1
    });
    ns.semctl(&root(), id, 0, IPC_RMID, SemctlArg::None)
        .unwrap();
    for t in [a, b, c] {
        assert_eq!(t.join().unwrap(), Err(Errno::EIDRM));
    }
    assert_eq!(
        ns.semop(&root(), id, &[Sembuf::new(0, 1, 0)], &WaitCtx::FOREVER),
        Err(Errno::EINVAL)
    );
}

#[test]
fn setval_and_setall_wake_waiters() {
    let (ns, id) = ns_with_set(2);
    let a = sleeper(&ns, id, vec![Sembuf::new(0, -3, 0)]).0;
    until("queued", || get(&ns, id, 0, GETNCNT) == 1);
    setval(&ns, id, 0, 3);
    assert_eq!(a.join().unwrap(), Ok(()));
    let b = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0), Sembuf::new(1, -1, 0)]).0;
    until("queued", || get(&ns, id, 0, GETNCNT) == 1);
    ns.semctl(&root(), id, 0, SETALL, SemctlArg::Array(&[1, 1]))
        .unwrap();
    assert_eq!(b.join().unwrap(), Ok(()));
    assert_eq!(get(&ns, id, 1, GETPID), 300, "the woken op records its pid");
}

#[test]
fn a_retried_sleeper_that_now_overflows_gets_erange() {
    let (ns, id) = ns_with_set(2);
    let a = sleeper(&ns, id, vec![Sembuf::new(0, -1, 0), Sembuf::new(1, 1, 0)]).0;
    until("queued", || get(&ns, id, 0, GETNCNT) == 1);
    setval(&ns, id, 1, 32767);
    setval(&ns, id, 0, 1);
    assert_eq!(a.join().unwrap(), Err(Errno::ERANGE));
    assert_eq!(get(&ns, id, 0, GETVAL), 1);
}

/// Host-verified (Linux 6.18): after one change, waiting wait-for-zero operations are served
/// before altering ones, whatever their arrival order, so both of these complete.
#[test]
fn zero_waiters_are_served_before_altering_ops_in_one_scan() {
    for zero_first in [true, false] {
        let (ns, id) = ns_with_set(3);
        setval(&ns, id, 1, 1);
        let z_ops = vec![Sembuf::new(1, 0, 0), Sembuf::new(0, 0, 0)];
        let x_ops = vec![Sembuf::new(2, -1, 0), Sembuf::new(0, 1, 0)];
        let (first, second) = if zero_first {
            (z_ops, x_ops)
        } else {
            (x_ops, z_ops)
        };
        let a = sleeper(&ns, id, first).0;
        until("first queued", || {
            get(&ns, id, 1, GETZCNT) + get(&ns, id, 2, GETNCNT) == 1
        });
        let b = sleeper(&ns, id, second).0;
        until("second queued", || {
            get(&ns, id, 1, GETZCNT) + get(&ns, id, 2, GETNCNT) == 2
        });
        op(&ns, id, &[Sembuf::new(1, -1, 0), Sembuf::new(2, 1, 0)]).unwrap();
        assert_eq!(a.join().unwrap(), Ok(()));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(get(&ns, id, 0, GETVAL), 1);
    }
}
