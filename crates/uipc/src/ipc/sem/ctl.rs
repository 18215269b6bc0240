//! semget and semctl (`ipc/sem.c`: `ksys_semget`, `newary`, `sem_more_checks`,
//! `ksys_semctl`, `semctl_info`, `semctl_stat`, `semctl_main`, `semctl_setval`,
//! `semctl_down`, `freeary`), every command with Linux's checks in Linux's order.
//!
//! Locks: creation, IPC_SET and IPC_RMID hold the registry's writer lock, then the set in
//! global mode; the other commands take no registry lock (the `*_INFO` ones take it for
//! reading) and use the set in global mode, as Linux's `sem_lock(sma, NULL, -1)`.

use super::lock::Locked;
use super::types::{SemInfo, SemctlArg, SemctlOut, SemidDs};
use super::SemSet;
use crate::errno::Errno;
use crate::ipc::consts::*;
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::perm::{IpcPerm, PERM_READ, PERM_WRITE};
use crate::sync::{lock, Ordering::Relaxed};
use crate::{Cred, IpcId, IpcKey, Result};

impl SemSet {
    /// The latest otime over the semaphores (`get_semotime`).
    pub(crate) fn otime(&self) -> i64 {
        self.sems().iter().map(|s| lock(s).otime).max().unwrap_or(0)
    }
}

impl IpcNamespace {
    /// semget(2): EINVAL for `nsems < 0 || nsems > semmsl` before the key lookup; then
    /// Linux's ipcget order. Creating: EINVAL for nsems 0, ENOSPC past semmns or semmni.
    /// Opening: EINVAL if nsems exceeds the set's, then EACCES from the mode bits of `flag`
    /// (both read from the key map's entry, not from the set).
    pub fn semget(&self, cred: &Cred, key: i32, nsems: i32, flag: i32) -> Result<i32> {
        if nsems < 0 || nsems > self.limits.semmsl() {
            return Err(Errno::EINVAL);
        }
        let reg = &self.sem.registry;
        let key = IpcKey::new(key);
        reg.get_or_create(
            key,
            flag,
            |free| {
                if nsems == 0 {
                    return Err(Errno::EINVAL);
                }
                let used = self.sem.used_sems.load(Relaxed);
                if used + i64::from(nsems) > i64::from(self.limits.semmns()) {
                    return Err(Errno::ENOSPC);
                }
                let now = self.now();
                let perm = IpcPerm::new(cred, flag);
                let id = free.add_then(
                    self.limits.semmni(),
                    (&perm, nsems as u32),
                    |id| SemSet::new(id, key, &perm, nsems as usize, now),
                    |set| set.header.id(),
                )?;
                // Written only under the registry's writer lock (held here): no RMW needed.
                self.sem.used_sems.store(used + i64::from(nsems), Relaxed);
                Ok(id)
            },
            |entry| {
                if nsems as u32 > entry.info {
                    return Err(Errno::EINVAL);
                }
                entry.perm.check(cred, flag)
            },
        )
        .map(IpcId::get)
    }

    /// semctl(2), every command. EINVAL for a negative id or an unknown command.
    ///
    /// `cmd` is taken as the x86-64 kernel takes it: its semctl system call does not parse
    /// IPC_64 (no `ARCH_WANT_IPC_PARSE_VERSION`), so `IPC_STAT | IPC_64` is an unknown command
    /// (EINVAL), as the host shows; glibc never sets the bit there.
    pub fn semctl(
        &self,
        cred: &Cred,
        semid: i32,
        semnum: i32,
        cmd: i32,
        arg: SemctlArg<'_>,
    ) -> Result<SemctlOut> {
        if semid < 0 {
            return Err(Errno::EINVAL);
        }
        let id = IpcId::new(semid);
        // Every command but the *_INFO ones reads or changes a set: take it back first.
        let _inside = (!matches!(cmd, IPC_INFO | SEM_INFO)).then(|| self.sem_fast_enter(id));
        match cmd {
            IPC_INFO | SEM_INFO => Ok(self.sem_info(cmd)),
            IPC_STAT | SEM_STAT | SEM_STAT_ANY => self.sem_stat(cred, id, cmd),
            GETALL | GETVAL | GETPID | GETNCNT | GETZCNT | SETALL => {
                self.sem_main(cred, id, semnum, cmd, arg)
            }
            SETVAL => match arg {
                SemctlArg::Val(v) => self.sem_setval(cred, id, semnum, v),
                _ => Err(Errno::EFAULT),
            },
            IPC_SET => match arg {
                SemctlArg::Set { uid, gid, mode } => {
                    self.sem_down(cred, id, Some((uid, gid, mode)))
                }
                _ => Err(Errno::EFAULT),
            },
            IPC_RMID => self.sem_down(cred, id, None),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The size of set `semid`, for a caller about to SETALL it: the lookup and the write
    /// permission check SETALL makes before it reads its values (EINVAL, EIDRM, EACCES).
    pub fn sem_nsems_for_setall(&self, cred: &Cred, semid: i32) -> Result<usize> {
        if semid < 0 {
            return Err(Errno::EINVAL);
        }
        let set = self.sem.registry.lookup(IpcId::new(semid))?;
        set.perm.get().check(cred, PERM_WRITE)?;
        Ok(set.nsems())
    }

    fn sem_info(&self, cmd: i32) -> SemctlOut {
        let l = &self.limits;
        let mut info = SemInfo {
            semmap: SEMMAP,
            semmni: l.semmni(),
            semmns: l.semmns(),
            semmnu: SEMMNU,
            semmsl: l.semmsl(),
            semopm: l.semopm(),
            semume: SEMUME,
            semusz: SEMUSZ,
            semvmx: SEMVMX,
            semaem: SEMAEM,
        };
        let st = self.sem.registry.read();
        if cmd == SEM_INFO {
            info.semusz = st.in_use() as i32;
            info.semaem = self.sem.used_sems.load(Relaxed) as i32;
        }
        SemctlOut::Info(st.max_idx(), info)
    }

    /// IPC_STAT of set `id`; SEM_STAT and SEM_STAT_ANY take the index part of the number.
    fn sem_stat(&self, cred: &Cred, id: IpcId, cmd: i32) -> Result<SemctlOut> {
        let reg = &self.sem.registry;
        let set = if cmd == IPC_STAT {
            reg.lookup(id)?
        } else {
            // Linux looks the index up with the sequence bits masked off.
            reg.lookup_index(self.layout.idx(id))?
        };
        if cmd != SEM_STAT_ANY {
            set.perm.get().check(cred, PERM_READ)?;
        }
        let arr = lock(&set.array);
        if arr.deleted {
            return Err(Errno::EIDRM);
        }
        let id = set.header.id();
        let ds = SemidDs {
            perm: set.perm.stat(set.header.key().get(), self.layout.seq(id)),
            otime: set.otime(),
            ctime: arr.ctime,
            nsems: set.nsems() as u64,
        };
        Ok(SemctlOut::Stat(
            if cmd == IPC_STAT { 0 } else { id.get() },
            ds,
        ))
    }

    fn sem_main(
        &self,
        cred: &Cred,
        id: IpcId,
        semnum: i32,
        cmd: i32,
        arg: SemctlArg<'_>,
    ) -> Result<SemctlOut> {
        let set = self.sem.registry.lookup(id)?;
        let nsems = set.nsems();
        set.perm
            .get()
            .check(cred, if cmd == SETALL { PERM_WRITE } else { PERM_READ })?;
        match cmd {
            GETALL => {
                let mut locked = Locked::Global(set.lock_global());
                if locked.deleted() {
                    return Err(Errno::EIDRM);
                }
                let vals = (0..nsems).map(|n| locked.slot(n).val as u16).collect();
                return Ok(SemctlOut::All(vals));
            }
            SETALL => {
                let SemctlArg::Array(vals) = arg else {
                    return Err(Errno::EFAULT);
                };
                if vals.len() < nsems {
                    return Err(Errno::EFAULT);
                }
                if vals[..nsems].iter().any(|&v| i32::from(v) > SEMVMX) {
                    return Err(Errno::ERANGE);
                }
                let g = set.lock_global();
                if g.arr.deleted {
                    return Err(Errno::EIDRM);
                }
                set.reset_undo(None);
                let mut locked = Locked::Global(g);
                for (n, &v) in vals[..nsems].iter().enumerate() {
                    let mut s = locked.slot(n);
                    s.val = i32::from(v);
                    s.pid = cred.tgid.get();
                }
                self.sem_changed(&mut locked, 0..nsems);
                return Ok(SemctlOut::Ret(0));
            }
            _ => {}
        }
        if semnum < 0 || semnum as usize >= nsems {
            return Err(Errno::EINVAL);
        }
        let n = semnum as usize;
        let mut locked = Locked::Global(set.lock_global());
        if locked.deleted() {
            return Err(Errno::EIDRM);
        }
        let r = match cmd {
            GETVAL => locked.slot(n).val,
            GETPID => locked.slot(n).pid,
            _ => count_waiters(&mut locked, n, cmd == GETZCNT),
        };
        Ok(SemctlOut::Ret(r))
    }

    /// After SETVAL/SETALL: ctime, the wakeup scan, and otime of semaphore 0 if it woke
    /// someone (Linux's `do_smart_update(sma, NULL, 0, 0)`).
    fn sem_changed(&self, locked: &mut Locked<'_>, changed: impl IntoIterator<Item = usize>) {
        let now = self.now();
        if let Locked::Global(g) = locked {
            g.arr.ctime = now;
        }
        if locked.update(changed) {
            locked.slot(0).otime = now;
        }
    }

    fn sem_setval(&self, cred: &Cred, id: IpcId, semnum: i32, val: i32) -> Result<SemctlOut> {
        if !(0..=SEMVMX).contains(&val) {
            return Err(Errno::ERANGE);
        }
        let set = self.sem.registry.lookup(id)?;
        if semnum < 0 || semnum as usize >= set.nsems() {
            return Err(Errno::EINVAL);
        }
        set.perm.get().check(cred, PERM_WRITE)?;
        let n = semnum as usize;
        let g = set.lock_global();
        if g.arr.deleted {
            return Err(Errno::EIDRM);
        }
        set.reset_undo(Some(n));
        let mut locked = Locked::Global(g);
        {
            let mut s = locked.slot(n);
            s.val = val;
            s.pid = cred.tgid.get();
        }
        self.sem_changed(&mut locked, [n]);
        Ok(SemctlOut::Ret(0))
    }

    /// IPC_SET (`set` given) and IPC_RMID: registry writer lock, lookup (EINVAL), owner or
    /// CAP_SYS_ADMIN (EPERM). RMID wakes every sleeper with EIDRM and frees the id.
    fn sem_down(
        &self,
        cred: &Cred,
        id: IpcId,
        set_to: Option<(u32, u32, u32)>,
    ) -> Result<SemctlOut> {
        let reg = &self.sem.registry;
        let mut st = reg.write();
        let set = reg.lookup(id)?;
        set.perm.get().check_owner(cred)?;
        let mut g = set.lock_global();
        if let Some((uid, gid, mode)) = set_to {
            let mut p = set.perm.get();
            p.set(uid, gid, mode)?;
            set.perm.store(&p);
            reg.set_key_perm(&mut st, &set.header, &p);
            g.arr.ctime = self.now();
            return Ok(SemctlOut::Ret(0));
        }
        g.arr.deleted = true;
        for q in g.arr.complex.take_all() {
            q.waiter.complete(Err(Errno::EIDRM));
        }
        for s in set.sems().iter() {
            for q in lock(s).pending.take_all() {
                q.waiter.complete(Err(Errno::EIDRM));
            }
        }
        reg.remove(&mut st, &set);
        self.sem.used_sems.fetch_sub(set.nsems() as i64, Relaxed);
        let entries = set.close_undo();
        drop(g);
        drop(st);
        self.sem_forget_undos(entries);
        Ok(SemctlOut::Ret(0))
    }
}

/// GETNCNT / GETZCNT: sleepers whose blocking sop is on semaphore `n` and takes (NCNT) or
/// waits for zero (ZCNT); each sleeper counts once.
fn count_waiters(locked: &mut Locked<'_>, n: usize, zero: bool) -> i32 {
    let hit = |op: i16| if zero { op == 0 } else { op < 0 };
    let mut count = locked
        .slot(n)
        .pending
        .iter()
        .filter(|q| hit(q.blocking_sop().sem_op))
        .count();
    if let Locked::Global(g) = locked {
        count += g
            .arr
            .complex
            .iter()
            .map(|q| q.blocking_sop())
            .filter(|s| s.sem_num as usize == n && hit(s.sem_op))
            .count();
    }
    count as i32
}
