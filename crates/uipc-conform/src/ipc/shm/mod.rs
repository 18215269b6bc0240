//! shm operations for `uipc conform ipc`. Keys: `ctx.key(2, n)`.
//!
//! Each step draws one operation (shmget with sizes from 0 to 1 TiB and past shmmax, shmat
//! with good and bad ids, addresses and flags, shmdt of live, unaligned and just-detached
//! addresses, every shmctl command including bad ones, the shm sysctls, and a forked creator
//! that exits), applies it to the host with real system calls and to the engine, and compares
//! results. Ids must be equal on both sides. Attachments stay alive across steps: the host's
//! real mappings and the engine's records are paired in a list, and writes go through both so
//! that the rss columns agree (Linux counts a page once it is touched).
//!
//! The run's state lives in a thread-local, reset when a new run starts (the engine no longer
//! knows the attachments it lists). Host addresses are never given to `shmat` except ones that fail before mapping
//! (unaligned without SHM_RND, SHM_REMAP with NULL), so the harness never maps over itself.

use super::host::{as_user, errno, result};
use super::Ctx;
mod ctl;

use ctl::*;
use std::cell::RefCell;
use uipc::ipc::consts::*;
use uipc::{Cred, Errno};

/// This type's key base.
pub(super) const BASE: i32 = 2;
/// At most this many live attachments (beyond it, steps detach).
const MAX_ATTACH: usize = 12;

pub(super) struct Attached {
    host: usize,
    /// The host segment's size when attached: writes stay inside the host mapping even if the
    /// two sides disagree about which segment an id names (after a divergence).
    host_size: u64,
    engine: u64,
    len: u64,
    read_only: bool,
    memory: uipc::ipc::shm::ShmAttach,
}

#[derive(Default)]
pub(super) struct State {
    attached: Vec<Attached>,
    pub(super) ids: Vec<i32>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Draws one shm operation, applies it to the host and the engine, and compares.
pub fn step(ctx: &mut Ctx) {
    STATE.with(|cell| {
        let mut st = cell.borrow_mut();
        let live = ctx.ns.shm_attachments(ctx.root.tgid.get());
        if st
            .attached
            .iter()
            .any(|a| !live.iter().any(|l| l.0 == a.engine))
        {
            // A new run (a new engine namespace): forget the old one's mappings.
            for a in st.attached.drain(..) {
                // SAFETY: a mapping this module made with shmat and never detached.
                unsafe { libc::shmdt(a.host as *const libc::c_void) };
            }
            st.ids.clear();
        }
        // Forget destroyed ids (stale ids are still drawn on purpose, see `pick_id`).
        st.ids.retain(|&id| host_stat(id, IPC_STAT).is_ok());
        one_step(ctx, &mut st);
    });
}

/// The engine identity matching the host's `as_user`: only the effective ids change there,
/// so the real and saved ids (SHM_LOCK charges the real uid) stay the process's own.
pub(super) fn engine_cred(ctx: &Ctx, user: bool) -> Cred {
    let mut c = ctx.cred(user).clone();
    c.uid = ctx.root.uid;
    c.gid = ctx.root.gid;
    c.suid = ctx.root.suid;
    c.sgid = ctx.root.sgid;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0 {
        c.rlimit_memlock = lim.rlim_cur;
    }
    c
}

pub(super) fn pick_id(ctx: &mut Ctx, st: &State) -> i32 {
    match ctx.rng.below(16) {
        0 => -1,
        1 => ctx.rng.range(0, 70000) as i32,
        2 if !st.ids.is_empty() => *ctx.rng.pick(&st.ids) + 32768,
        _ if !st.ids.is_empty() => *ctx.rng.pick(&st.ids),
        _ => 0,
    }
}

fn one_step(ctx: &mut Ctx, st: &mut State) {
    match ctx.rng.below(100) {
        0..=21 => op_shmget(ctx, st),
        22..=39 => op_shmat(ctx, st),
        40..=51 => op_shmdt(ctx, st),
        52..=66 => op_stat(ctx, st),
        67..=72 => op_set(ctx, st),
        73..=80 => op_rmid(ctx, st),
        81..=86 => op_lock(ctx, st),
        87..=91 => op_info(ctx),
        92..=93 => op_bad_cmd(ctx, st),
        94..=95 => op_sysctl(ctx, st),
        96 => op_lock_charge(ctx),
        _ => op_forked_creator(ctx, st),
    }
}

fn op_shmget(ctx: &mut Ctx, st: &mut State) {
    let user = ctx.pick_caller();
    let key = if ctx.rng.chance(1, 8) {
        IPC_PRIVATE
    } else {
        let n = ctx.rng.below(6) as i32;
        ctx.key(BASE, n)
    };
    let (mut size, reserve): (u64, bool) = *ctx.rng.pick(&[
        (0, false),
        (1, false),
        (4095, false),
        (4096, false),
        (5000, false),
        (20000, false),
        (65536, false),
        (1 << 20, false),
        (1 << 40, true),
        (u64::MAX, false),
    ]);
    if size == 1 << 20 && ctx.rng.chance(1, 2) {
        size = ctx.rng.range(1, 1 << 17) as u64;
    }
    let mode = *ctx.rng.pick(&[0o600, 0o640, 0o644, 0o666, 0o400, 0o060, 0]);
    let mut flag = mode;
    if ctx.rng.chance(3, 4) {
        flag |= IPC_CREAT;
    }
    if ctx.rng.chance(1, 5) {
        flag |= IPC_EXCL;
    }
    if reserve {
        flag |= SHM_NORESERVE;
    }
    if user && ctx.rng.chance(1, 10) {
        flag |= SHM_HUGETLB;
    }
    // SAFETY: plain integer arguments.
    let host = as_user(user, || {
        result(unsafe { libc::shmget(key, size as usize, flag) } as i64)
    })
    .map(|v| v as i32);
    if let Ok(id) = host {
        super::host::remember(super::host::Kind::Shm, id);
    }
    ctx.align_next_id(uipc::ipc::Sysctl::ShmNextId, &host);
    let eng = ctx.ns.shmget(&engine_cred(ctx, user), key, size, flag);
    let op = format!("shmget(key {key:#x}, size {size}, flag {flag:#o}) user={user}");
    ctx.check(&op, &host, &eng);
    if let Ok(id) = host {
        if !st.ids.contains(&id) {
            st.ids.push(id);
        }
    }
}

fn op_shmat(ctx: &mut Ctx, st: &mut State) {
    if st.attached.len() >= MAX_ATTACH {
        return op_shmdt(ctx, st);
    }
    let user = ctx.pick_caller();
    let id = pick_id(ctx, st);
    let (addr, mut flags): (u64, i32) = match ctx.rng.below(12) {
        0 => (0x7000_0000_0123, 0),
        1 => (0, SHM_REMAP),
        2 => (0, SHM_RND),
        _ => (0, 0),
    };
    if ctx.rng.chance(1, 4) {
        flags |= SHM_RDONLY;
    }
    if ctx.rng.chance(1, 8) {
        flags |= SHM_EXEC;
    }
    // SAFETY: the address is NULL or one the kernel rejects before mapping anything.
    let host = as_user(user, || unsafe {
        let p = libc::shmat(id, addr as *const libc::c_void, flags);
        if p as isize == -1 {
            Err(Errno::from_raw(errno()))
        } else {
            Ok(p as usize)
        }
    });
    let eng = ctx.ns.shmat(&engine_cred(ctx, user), id, addr, flags);
    let op = format!("shmat({id}, {addr:#x}, {flags:#o}) user={user}");
    ctx.check(
        &op,
        &host.map(|_| ()),
        &eng.as_ref().map(|_| ()).map_err(|e| *e),
    );
    match (host, eng) {
        (Ok(h), Ok(e)) => {
            let read_only = flags & SHM_RDONLY != 0;
            let host_size = host_stat(id, IPC_STAT).map_or(0, |(_, ds)| ds.segsz);
            let a = Attached {
                host: h,
                host_size,
                engine: e.addr,
                len: e.len,
                read_only,
                memory: e,
            };
            if !read_only && ctx.rng.chance(1, 2) {
                write_through(ctx, &a);
            }
            st.attached.push(a);
        }
        (Ok(h), Err(_)) => {
            // SAFETY: the mapping just made; undone so the host matches the engine.
            unsafe { libc::shmdt(h as *const libc::c_void) };
        }
        (Err(_), Ok(e)) => {
            let _ = ctx.ns.shmdt(&ctx.root, e.addr);
        }
        (Err(_), Err(_)) => {}
    }
}

/// Writes the same bytes through both sides of an attachment.
fn write_through(ctx: &mut Ctx, a: &Attached) {
    let size = a.memory.size.min(a.host_size);
    if size == 0 {
        return;
    }
    let off = ctx.rng.below(size.min(a.len).min(1 << 18)) as usize;
    let n = (ctx.rng.range(1, 9000) as usize).min(size as usize - off);
    let byte = ctx.rng.below(256) as u8;
    let data = vec![byte; n];
    // SAFETY: `a.host` maps at least `host_size >= size` bytes read-write and off + n <= size.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (a.host + off) as *mut u8, n) };
    let r = a.memory.write(off as u64, &data);
    ctx.check("write through attachment", &Ok(()), &r);
}

fn op_shmdt(ctx: &mut Ctx, st: &mut State) {
    if st.attached.is_empty() || ctx.rng.chance(1, 8) {
        let bad: u64 = 0x7000_0000_0001;
        // SAFETY: an unaligned address: the kernel rejects it without touching memory.
        let host = result(unsafe { libc::shmdt(bad as *const libc::c_void) } as i64).map(|_| ());
        let eng = ctx.ns.shmdt(&ctx.root, bad);
        ctx.check("shmdt(unaligned)", &host, &eng);
        return;
    }
    let i = ctx.rng.below(st.attached.len() as u64) as usize;
    let a = st.attached.swap_remove(i);
    if !a.read_only && ctx.rng.chance(1, 3) {
        write_through(ctx, &a);
    }
    let user = ctx.pick_caller();
    let cred = engine_cred(ctx, user);
    // SAFETY: a live mapping made by shmat in this module.
    let host = as_user(user, || {
        result(unsafe { libc::shmdt(a.host as *const _) } as i64)
    });
    let eng = ctx.ns.shmdt(&cred, a.engine);
    ctx.check("shmdt(live)", &host.map(|_| ()), &eng);
    if ctx.rng.chance(1, 3) {
        // SAFETY: detached just now; nothing was mapped since, so the kernel finds nothing.
        let host = result(unsafe { libc::shmdt(a.host as *const _) } as i64).map(|_| ());
        let eng = ctx.ns.shmdt(&cred, a.engine);
        ctx.check("shmdt(again)", &host, &eng);
    }
}
