//! Many threads attaching and detaching one segment while another thread removes it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uipc::ipc::consts::*;
use uipc::ipc::shm::{HeapMemory, ShmBacking, ShmMemory, ShmctlOut};
use uipc::ipc::{IpcNamespace, NamespaceOptions};
use uipc::{Cred, Errno};

/// Heap memory that counts how often segment memory is created and freed.
struct Counting {
    made: AtomicUsize,
    freed: Arc<AtomicUsize>,
}
struct Counted(HeapMemory, Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}
impl ShmMemory for Counted {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, o: u64, b: &mut [u8]) -> uipc::Result<()> {
        self.0.read_at(o, b)
    }
    fn write_at(&self, o: u64, d: &[u8]) -> uipc::Result<()> {
        self.0.write_at(o, d)
    }
    fn resident_pages(&self) -> u64 {
        self.0.resident_pages()
    }
}
impl ShmBacking for Counting {
    fn create(&self, _key: i32, size: u64) -> uipc::Result<Arc<dyn ShmMemory>> {
        self.made.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(Counted(HeapMemory::new(size), self.freed.clone())))
    }
}

#[test]
fn concurrent_attach_detach_and_rmid_destroy_exactly_once() {
    const ROUNDS: usize = 12;
    const THREADS: i32 = 6;
    const CYCLES: usize = 150;
    let backing = Arc::new(Counting {
        made: AtomicUsize::new(0),
        freed: Arc::new(AtomicUsize::new(0)),
    });
    let ns = Arc::new(IpcNamespace::with_options(NamespaceOptions {
        shm_backing: Some(backing.clone()),
        ..Default::default()
    }));
    let mut worker_attaches = 0;
    for round in 0..ROUNDS {
        let id = ns.shmget(&Cred::root(1), 0, 8192, 0o666).unwrap();
        // The main thread holds one attachment across the removal, so the segment is
        // marked SHM_DEST and the workers' attaches after it still succeed.
        let mine = ns.shmat(&Cred::root(1), id, 0, 0).unwrap();
        let mut handles = Vec::new();
        for t in 0..THREADS {
            let ns = ns.clone();
            handles.push(std::thread::spawn(move || {
                let me = Cred::root(1000 + t);
                let mut held = Vec::new();
                let mut attached = 0;
                for i in 0..CYCLES {
                    match ns.shmat(&me, id, 0, 0) {
                        Ok(a) => {
                            a.write((i % 8000) as u64, &[t as u8]).unwrap();
                            held.push(a.addr);
                            attached += 1;
                        }
                        Err(e) => assert!(e == Errno::EINVAL || e == Errno::EIDRM, "{e:?}"),
                    }
                    if held.len() > 2 || (i % 3 == 0 && !held.is_empty()) {
                        ns.shmdt(&me, held.remove(0)).unwrap();
                    }
                }
                for addr in held {
                    ns.shmdt(&me, addr).unwrap();
                }
                attached
            }));
        }
        let watcher = {
            let ns = ns.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    match ns.shmctl(&Cred::root(2), id, IPC_STAT, None) {
                        Ok(ShmctlOut::Stat(_, ds)) => assert!(
                            ds.nattch <= 3 * THREADS as u64 + 1,
                            "workers hold at most 3 each, main 1"
                        ),
                        Ok(o) => panic!("{o:?}"),
                        Err(e) => assert!(e == Errno::EINVAL || e == Errno::EIDRM, "{e:?}"),
                    }
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_micros(200 * round as u64));
        ns.shmctl(&Cred::root(1), id, IPC_RMID, None).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(100));
        ns.shmdt(&Cred::root(1), mine.addr).unwrap();
        let attaches: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        worker_attaches += attaches;
        watcher.join().unwrap();
        assert_eq!(
            ns.shmctl(&Cred::root(1), id, IPC_STAT, None).err(),
            Some(Errno::EINVAL),
            "round {round}: destroyed once everyone detached"
        );
    }
    let ShmctlOut::Usage(_, u) = ns.shmctl(&Cred::root(1), 0, SHM_INFO, None).unwrap() else {
        panic!()
    };
    assert_eq!(
        (u.used_ids, u.shm_tot),
        (0, 0),
        "pages returned exactly once per segment"
    );
    assert!(
        worker_attaches > 0,
        "workers raced the removal at least once"
    );
    assert_eq!(backing.made.load(Ordering::SeqCst), ROUNDS);
    assert_eq!(
        backing.freed.load(Ordering::SeqCst),
        ROUNDS,
        "every segment's memory freed"
    );
}

#[test]
fn exits_detaches_and_forced_toggles_racing_leave_consistent_books() {
    const THREADS: i32 = 4;
    const CYCLES: usize = 300;
    let ns = Arc::new(IpcNamespace::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let toggler = {
        let (ns, stop) = (ns.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut on = false;
            while !stop.load(Ordering::Relaxed) {
                on = !on;
                ns.sysctl_write(
                    &Cred::root(1),
                    uipc::ipc::Sysctl::ShmRmidForced,
                    if on { "1" } else { "0" },
                )
                .unwrap();
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let ns = ns.clone();
            std::thread::spawn(move || {
                let me = Cred::root(500 + t);
                let mut ids = Vec::new();
                for i in 0..CYCLES {
                    if let Ok(id) = ns.shmget(&me, 0, 4096 * (1 + i as u64 % 3), 0o666) {
                        ids.push(id);
                    }
                    // Attach to our own and to a neighbour's segments, if they still exist.
                    let target = ids[(i * 7) % ids.len()];
                    let mut held = Vec::new();
                    if let Ok(a) = ns.shmat(&me, target, 0, 0) {
                        held.push(a.addr);
                    }
                    if let Ok(a) = ns.shmat(&me, target + 1, 0, SHM_RDONLY) {
                        held.push(a.addr);
                    }
                    match i % 5 {
                        0 => {
                            let _ = ns.shmctl(&me, target, IPC_RMID, None);
                        }
                        1 => ns.process_exit(me.tgid.get()),
                        2 => ns.process_fork(me.tgid.get(), me.tgid.get() + 1000),
                        3 => ns.process_exit(me.tgid.get() + 1000),
                        _ => {}
                    }
                    for addr in held {
                        // Exit or exec may already have dropped it.
                        let r = ns.shmdt(&me, addr);
                        assert!(r.is_ok() || r == Err(Errno::EINVAL));
                    }
                }
                ns.process_exit(me.tgid.get());
                ns.process_exit(me.tgid.get() + 1000);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    toggler.join().unwrap();
    let root = Cred::root(1);
    ns.sysctl_write(&root, uipc::ipc::Sysctl::ShmRmidForced, "1")
        .unwrap();
    let ShmctlOut::Usage(_, u) = ns.shmctl(&root, 0, SHM_INFO, None).unwrap() else {
        panic!()
    };
    assert_eq!(
        (u.used_ids, u.shm_tot),
        (0, 0),
        "every creator exited and nothing is attached: all destroyed, all pages returned"
    );
    assert_eq!(ns.proc_sysvipc_shm().lines().count(), 1);
}
