//! The child side of `uipc bench shim`: the calls themselves, made through the C library so that
//! under `uipc run` the preload library serves them and natively the kernel does.
//!
//! Each measurement creates what it needs (untimed), times `iters` repetitions of one call (or
//! one pair or round trip), removes what it created and returns nanoseconds per repetition, or
//! `None` if any call failed (the driver then leaves the cell empty with a note).

use std::time::Instant;

/// What one row repeats, as the table shows it, and how it is measured.
pub(crate) struct Call {
    /// The row's name (with the `uipc run` option that routes the call, if one must).
    pub name: &'static str,
    /// Times `iters` repetitions: nanoseconds per repetition.
    pub measure: fn(u32) -> Option<f64>,
}

/// Every row of the calls table, in order.
pub(crate) const CALLS: &[Call] = &[
    Call {
        name: "semop",
        measure: semop_plain,
    },
    Call {
        name: "semop SEM_UNDO",
        measure: semop_undo,
    },
    Call {
        name: "semctl GETVAL",
        measure: getval,
    },
    Call {
        name: "semget existing key",
        measure: semget_existing,
    },
    Call {
        name: "msgget existing key",
        measure: msgget_existing,
    },
    Call {
        name: "msgsnd+msgrcv 64 B",
        measure: msg_pair,
    },
    Call {
        name: "sem ping-pong, 2 procs",
        measure: sem_pingpong,
    },
    Call {
        name: "msg ping-pong, 2 procs",
        measure: msg_pingpong,
    },
    Call {
        name: "shmat+shmdt",
        measure: shm_pair,
    },
    Call {
        name: "fcntl F_SETLK pair (--locks)",
        measure: fcntl_pair,
    },
    Call {
        name: "flock pair (--locks)",
        measure: flock_pair,
    },
    Call {
        name: "timer_gettime (--timers)",
        measure: timer_get,
    },
    Call {
        name: "timer_settime (--timers)",
        measure: timer_set,
    },
];

/// Runs `call(i)` for `i` in `0..iters`: nanoseconds per call, or `None` at the first that
/// fails (returns false).
fn per_call(iters: u32, mut call: impl FnMut(u32) -> bool) -> Option<f64> {
    let t0 = Instant::now();
    for i in 0..iters {
        if !call(i) {
            return None;
        }
    }
    Some(ns_per(t0, iters))
}

fn ns_per(t0: Instant, iters: u32) -> f64 {
    t0.elapsed().as_secs_f64() * 1e9 / f64::from(iters.max(1))
}

/// A semaphore set of `n` semaphores, removed when dropped.
pub(crate) struct SemSet(pub i32);

impl SemSet {
    pub(crate) fn new(n: i32) -> Option<SemSet> {
        // SAFETY: integer arguments only.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, n, 0o600) };
        (id >= 0).then_some(SemSet(id))
    }
}

impl Drop for SemSet {
    fn drop(&mut self) {
        // SAFETY: integer arguments only.
        unsafe { libc::semctl(self.0, 0, libc::IPC_RMID) };
    }
}

struct Queue(i32);

impl Queue {
    fn new(key: libc::key_t) -> Option<Queue> {
        // SAFETY: integer arguments only.
        let id = unsafe { libc::msgget(key, libc::IPC_CREAT | 0o600) };
        (id >= 0).then_some(Queue(id))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID takes no buffer.
        unsafe { libc::msgctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// One semop of one sop on semaphore `num` of `id`.
pub(crate) fn sop(id: i32, num: u16, op: i16, flg: i16) -> bool {
    let mut s = libc::sembuf {
        sem_num: num,
        sem_op: op,
        sem_flg: flg,
    };
    // SAFETY: one valid sembuf.
    unsafe { libc::semop(id, &mut s, 1) == 0 }
}

/// `iters` semops alternating +1 and -1 on one uncontended semaphore.
fn semop_with(iters: u32, flg: i16) -> Option<f64> {
    let set = SemSet::new(1)?;
    per_call(iters, |i| {
        sop(set.0, 0, if i % 2 == 0 { 1 } else { -1 }, flg)
    })
}

fn semop_plain(iters: u32) -> Option<f64> {
    semop_with(iters, 0)
}

fn semop_undo(iters: u32) -> Option<f64> {
    semop_with(iters, libc::SEM_UNDO as i16)
}

fn getval(iters: u32) -> Option<f64> {
    let set = SemSet::new(1)?;
    per_call(iters, |_| {
        // SAFETY: GETVAL takes no argument.
        unsafe { libc::semctl(set.0, 0, libc::GETVAL) == 0 }
    })
}

/// A key unlikely to be used by anyone else in the namespace.
fn own_key(salt: i32) -> libc::key_t {
    // SAFETY: getpid has no preconditions.
    0x5e1f_0000 ^ (unsafe { libc::getpid() } << 4) ^ salt
}

fn semget_existing(iters: u32) -> Option<f64> {
    let key = own_key(1);
    // SAFETY: integer arguments only.
    let id = unsafe { libc::semget(key, 1, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
    let set = (id >= 0).then_some(SemSet(id))?;
    per_call(iters, |_| {
        // SAFETY: integer arguments only.
        unsafe { libc::semget(key, 1, 0o600) == set.0 }
    })
}

fn msgget_existing(iters: u32) -> Option<f64> {
    let key = own_key(2);
    let q = Queue::new(key)?;
    per_call(iters, |_| {
        // SAFETY: integer arguments only.
        unsafe { libc::msgget(key, 0o600) == q.0 }
    })
}

/// A message of 64 bytes of text behind its type.
#[repr(C)]
struct Msg {
    mtype: libc::c_long,
    text: [u8; 64],
}

fn send(q: i32, m: &Msg) -> bool {
    // SAFETY: `m` is a valid message with 64 bytes of text.
    unsafe { libc::msgsnd(q, (m as *const Msg).cast(), 64, 0) == 0 }
}

fn recv(q: i32, m: &mut Msg, mtype: libc::c_long) -> bool {
    // SAFETY: `m` has room for 64 bytes of text.
    unsafe { libc::msgrcv(q, (m as *mut Msg).cast(), 64, mtype, 0) == 64 }
}

fn msg_pair(iters: u32) -> Option<f64> {
    let q = Queue::new(libc::IPC_PRIVATE)?;
    let mut m = Msg {
        mtype: 1,
        text: [7; 64],
    };
    per_call(iters, |_| {
        m.mtype = 1;
        send(q.0, &m) && recv(q.0, &mut m, 0)
    })
}

/// Runs `child` in a forked process (leaving with `_exit`, its result as the status) while the
/// parent times `iters` round trips of `parent`; the child's failure fails the measurement.
fn two_procs(iters: u32, parent: impl Fn() -> bool, child: impl Fn() -> bool) -> Option<f64> {
    // SAFETY: the child only makes IPC calls and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        let ok = (0..iters).all(|_| child());
        // SAFETY: leaving the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(i32::from(!ok)) };
    }
    let t0 = Instant::now();
    let ok = (0..iters).all(|_| parent());
    let ns = ns_per(t0, iters);
    let mut status = 0;
    if !ok {
        // SAFETY: killing our own child, which may wait for a round trip that never comes.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // SAFETY: reaping our own child into a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    (ok && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0).then_some(ns)
}

fn sem_pingpong(iters: u32) -> Option<f64> {
    let set = SemSet::new(2)?;
    let id = set.0;
    two_procs(
        iters,
        || sop(id, 0, 1, 0) && sop(id, 1, -1, 0),
        || sop(id, 0, -1, 0) && sop(id, 1, 1, 0),
    )
}

fn msg_pingpong(iters: u32) -> Option<f64> {
    let q = Queue::new(libc::IPC_PRIVATE)?;
    let id = q.0;
    let round = |out: libc::c_long, back: libc::c_long, first: bool| {
        let mut m = Msg {
            mtype: out,
            text: [3; 64],
        };
        if first {
            send(id, &m) && recv(id, &mut m, back)
        } else {
            recv(id, &mut m, back) && {
                m.mtype = out;
                send(id, &m)
            }
        }
    };
    two_procs(iters, || round(1, 2, true), || round(2, 1, false))
}

fn shm_pair(iters: u32) -> Option<f64> {
    // SAFETY: integer arguments only.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, 0o600) };
    if id < 0 {
        return None;
    }
    let t0 = Instant::now();
    let mut ok = true;
    for _ in 0..iters {
        // SAFETY: attaching at an address the kernel (or the library) picks.
        let p = unsafe { libc::shmat(id, std::ptr::null(), 0) };
        // SAFETY: detaching what was just attached.
        if p as isize == -1 || unsafe { libc::shmdt(p) } != 0 {
            ok = false;
            break;
        }
    }
    let ns = ns_per(t0, iters);
    // SAFETY: IPC_RMID takes no buffer.
    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    ok.then_some(ns)
}

/// A scratch file, unlinked at once (the descriptor keeps it), closed when dropped.
struct Scratch(i32);

impl Scratch {
    fn new() -> Option<Scratch> {
        let path = std::env::temp_dir().join(format!("uipc-bench-shim-{}", std::process::id()));
        let c = std::ffi::CString::new(path.into_os_string().into_encoded_bytes()).ok()?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
        };
        // SAFETY: the same path.
        unsafe { libc::unlink(c.as_ptr()) };
        (fd >= 0).then_some(Scratch(fd))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.0) };
    }
}

fn fcntl_pair(iters: u32) -> Option<f64> {
    let f = Scratch::new()?;
    // SAFETY: an all-zero struct flock is valid; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_whence = libc::SEEK_SET as i16;
    per_call(iters, |_| {
        [libc::F_WRLCK, libc::F_UNLCK].into_iter().all(|ty| {
            fl.l_type = ty as i16;
            // SAFETY: a valid struct flock.
            unsafe { libc::fcntl(f.0, libc::F_SETLK, &fl) == 0 }
        })
    })
}

fn flock_pair(iters: u32) -> Option<f64> {
    let f = Scratch::new()?;
    per_call(iters, |_| {
        // SAFETY: integer arguments only.
        unsafe { libc::flock(f.0, libc::LOCK_EX) == 0 && libc::flock(f.0, libc::LOCK_UN) == 0 }
    })
}

/// A SIGEV_NONE CLOCK_MONOTONIC timer, deleted when dropped.
struct Timer(libc::timer_t);

impl Timer {
    fn new() -> Option<Timer> {
        // SAFETY: an all-zero sigevent is valid; SIGEV_NONE needs nothing else.
        let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
        ev.sigev_notify = libc::SIGEV_NONE;
        let mut t: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid sigevent and out pointer.
        (unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut t) } == 0)
            .then_some(Timer(t))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: our own timer.
        unsafe { libc::timer_delete(self.0) };
    }
}

const ARMED: libc::itimerspec = libc::itimerspec {
    it_interval: libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    },
    it_value: libc::timespec {
        tv_sec: 100,
        tv_nsec: 0,
    },
};

fn timer_get(iters: u32) -> Option<f64> {
    let t = Timer::new()?;
    // SAFETY: a valid itimerspec; no old value wanted.
    if unsafe { libc::timer_settime(t.0, 0, &ARMED, std::ptr::null_mut()) } != 0 {
        return None;
    }
    let mut cur = ARMED;
    per_call(iters, |_| {
        // SAFETY: a valid out pointer.
        unsafe { libc::timer_gettime(t.0, &mut cur) == 0 }
    })
}

fn timer_set(iters: u32) -> Option<f64> {
    let t = Timer::new()?;
    per_call(iters, |_| {
        // SAFETY: a valid itimerspec; no old value wanted.
        unsafe { libc::timer_settime(t.0, 0, &ARMED, std::ptr::null_mut()) == 0 }
    })
}
