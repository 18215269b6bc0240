//! Frames against a live daemon: random requests, valid and mutated (bytes flipped, cut,
//! extended, random lengths), from four connections at once, with a fixed seed and a time
//! bound. Every frame gets its reply (a call that parks is cancelled), an error and a closed
//! connection, or nothing if it is a Cancel; the daemon never stops answering a separate
//! client, and its memory does not grow once the namespace is full.
//!
//! `UIPC_FUZZ_SECS` (default 3) and `UIPC_FUZZ_SEED` (default fixed) set a longer or
//! different run; the totals are printed (`--nocapture`).

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use uipc::ipc::sem::{Sembuf, Timespec};
use uipc::ipc::Sysctl;
use uipc::Cred;
use uipc_proto::client::Connection;
use uipc_proto::transport::{recv_frame, send_frame};
use uipc_proto::{LockRequest, Request, SemArg, VERSION};
mod common;

/// The seeded generator, with the draws that find bugs in a decoder.
struct Rng(fastrand::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }

    /// An integer from the values that find bugs: edges, small numbers, ids in use.
    fn int(&mut self) -> i64 {
        match self.below(8) {
            0 => [
                0,
                1,
                -1,
                i32::MIN as i64,
                i32::MAX as i64,
                i64::MIN,
                i64::MAX,
            ][self.below(7) as usize],
            1 => self.next() as i64,
            2 => self.next() as i32 as i64,
            3..=5 => self.below(8) as i64,
            _ => self.below(40_000) as i64,
        }
    }

    fn i32(&mut self) -> i32 {
        self.int() as i32
    }

    fn flag(&mut self) -> i32 {
        // Permission bits, IPC_CREAT/EXCL/NOWAIT and the odd command bits.
        (self.below(0o10000) as i32) | [0, 0o1000, 0o2000, 0o4000, 0o10000][self.below(5) as usize]
    }
}

fn request(r: &mut Rng) -> Request {
    match r.below(18) {
        0 => Request::Semget {
            key: r.below(16) as i32,
            nsems: r.below(40) as i32,
            flag: r.flag(),
        },
        1 => {
            let n = r.below(6) as usize;
            Request::Semtimedop {
                semid: r.i32(),
                nsops: if r.below(8) == 0 {
                    r.int() as u64
                } else {
                    n as u64
                },
                sops: (r.below(8) != 0).then(|| {
                    (0..n)
                        .map(|_| Sembuf::new(r.below(40) as u16, r.int() as i16, r.flag() as i16))
                        .collect()
                }),
                timeout: (r.below(2) == 0).then(|| Timespec {
                    tv_sec: r.below(2) as i64,
                    tv_nsec: r.int(),
                }),
            }
        }
        2 => Request::SemNsems { semid: r.i32() },
        3 => Request::Semctl {
            semid: r.i32(),
            semnum: r.i32(),
            cmd: r.below(22) as i32,
            arg: match r.below(4) {
                0 => SemArg::None,
                1 => SemArg::Val(r.i32()),
                2 => SemArg::Array((0..r.below(50)).map(|_| r.int() as u16).collect()),
                _ => SemArg::Set {
                    uid: r.int() as u32,
                    gid: r.int() as u32,
                    mode: r.flag() as u32,
                },
            },
        },
        4 => Request::Msgget {
            key: r.below(16) as i32,
            flag: r.flag(),
        },
        5 => {
            let len = r.below(300);
            Request::Msgsnd {
                msqid: r.i32(),
                mtype: r.int(),
                msgsz: if r.below(8) == 0 { r.int() as u64 } else { len },
                text: (r.below(8) != 0).then(|| vec![r.next() as u8; len as usize]),
                flags: r.flag(),
            }
        }
        6 => Request::Msgrcv {
            msqid: r.i32(),
            maxsize: r.int(),
            msgtyp: r.int(),
            flags: r.flag(),
        },
        7 => Request::Msgctl {
            msqid: r.i32(),
            cmd: r.below(14) as i32,
            set: None,
        },
        8 => Request::Shmget {
            key: r.below(16) as i32,
            size: r.int() as u64,
            flag: r.flag(),
        },
        9 => Request::Shmat {
            shmid: r.i32(),
            addr: r.int() as u64,
            flags: r.flag(),
        },
        10 => Request::Shmdt {
            addr: r.int() as u64,
        },
        11 => Request::ShmMoved {
            from: r.int() as u64,
            to: r.int() as u64,
        },
        12 => Request::Shmctl {
            shmid: r.i32(),
            cmd: r.below(16) as i32,
            set: None,
        },
        13 => Request::ForkChild { child: r.i32() },
        14 => Request::Lock(LockRequest::Flock { cmd: r.i32() }),
        15 => Request::Lock(match r.below(3) {
            0 => LockRequest::List,
            1 => LockRequest::Hints,
            _ => LockRequest::Close { fd: r.i32() },
        }),
        16 => Request::Hello {
            version: if r.below(4) == 0 {
                r.int() as u32
            } else {
                VERSION
            },
            new_image: r.below(2) == 0,
            area: r.below(4) as u8,
        },
        _ => Request::ShmRemap {
            addr: r.int() as u64,
            last: r.below(2) == 0,
        },
    }
}

/// A frame's payload: a request, often damaged.
fn payload(r: &mut Rng) -> Vec<u8> {
    let mut p = request(r).encode();
    match r.below(6) {
        0 if !p.is_empty() => {
            for _ in 0..=r.below(4) {
                let i = r.below(p.len() as u64) as usize;
                p[i] ^= 1 << r.below(8);
            }
        }
        1 => p.truncate(r.below(p.len() as u64 + 1) as usize),
        2 => p.extend((0..r.below(16)).map(|_| r.next() as u8)),
        3 if r.below(8) == 0 => p = (0..r.below(64)).map(|_| r.next() as u8).collect(),
        _ => {}
    }
    p
}

fn session(path: &Path) -> UnixStream {
    let c = Connection::connect(path, false).unwrap().into_stream();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn vm_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One connection's share of the run: sends frames until `until`; returns the count.
fn fuzz(path: &Path, seed: u64, until: Instant) -> u64 {
    let mut r = Rng(fastrand::Rng::with_seed(seed));
    let mut s = session(path);
    let mut frames = 0;
    while Instant::now() < until {
        let p = payload(&mut r);
        frames += 1;
        // Now and then a raw length that does not match what follows.
        if r.below(200) == 0 {
            let _ = (&s).write_all_len(r.next() as u32, &p);
            s = session(path);
            continue;
        }
        if send_frame(s.as_raw_fd(), &p, true, None).is_err() {
            s = session(path);
            continue;
        }
        if matches!(Request::decode(&p), Ok(Request::Cancel)) {
            continue;
        }
        if !common::readable(&s, 50) {
            // A call that waits: cancel it; its reply must come.
            if send_frame(s.as_raw_fd(), &Request::Cancel.encode(), true, None).is_err() {
                s = session(path);
                continue;
            }
            assert!(
                common::readable(&s, 10_000),
                "a cancelled call is never answered"
            );
        }
        if recv_frame(s.as_raw_fd(), false).is_err() {
            // An error reply closed it, or the frame was refused.
            s = session(path);
        }
    }
    frames
}

trait WriteLen {
    fn write_all_len(&self, len: u32, payload: &[u8]) -> std::io::Result<()>;
}

impl WriteLen for &UnixStream {
    fn write_all_len(&self, len: u32, payload: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut s = *self;
        s.write_all(&len.to_le_bytes())?;
        s.write_all(payload)
    }
}

#[test]
fn random_frames_against_a_live_daemon() {
    let secs: u64 = std::env::var("UIPC_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("UIPC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EC_F022);
    let (path, shared) = common::start("fuzz");
    // A small namespace, so that its contents stop growing early.
    let root = Cred::root(std::process::id() as i32);
    for (which, value) in [
        (Sysctl::MsgMni, "8"),
        (Sysctl::ShmMni, "8"),
        (Sysctl::Sem, "40 320 32 8"),
        (Sysctl::ShmAll, "65536"),
    ] {
        shared.ns().sysctl_write(&root, which, value).unwrap();
    }
    let good = Connection::connect(&path, false).unwrap();
    let check = |what: &str| {
        let t = Instant::now();
        let (resp, _) = good
            .call(&Request::SemNsems { semid: -1 }, false)
            .unwrap_or_else(|e| panic!("{what}: the daemon stopped answering: {e}"));
        assert_eq!(resp, uipc_proto::Response::Error(libc::EINVAL));
        t.elapsed()
    };
    let start = Instant::now();
    let warm = start + Duration::from_secs(secs.div_ceil(4).max(1));
    let end = start + Duration::from_secs(secs);
    let run = |until: Instant, round: u64| -> u64 {
        std::thread::scope(|sc| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let p = path.clone();
                    sc.spawn(move || fuzz(&p, seed ^ (round * 4 + i).wrapping_mul(0x9E37), until))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        })
    };
    let mut frames = run(warm, 0);
    check("after warm-up");
    let rss_warm = vm_rss_kb();
    let mut worst = Duration::ZERO;
    let mut round = 1;
    while Instant::now() < end {
        frames += run((Instant::now() + Duration::from_secs(1)).min(end), round);
        worst = worst.max(check("between rounds"));
        round += 1;
    }
    let rss_end = vm_rss_kb();
    println!(
        "{frames} frames in {:?} (seed {seed:#x}); RSS after warm-up {rss_warm} kB, at the end {rss_end} kB; slowest check {worst:?}",
        start.elapsed()
    );
    assert!(frames > 100, "too few frames: {frames}");
    assert!(
        rss_end < rss_warm + (32 << 10),
        "memory grew from {rss_warm} kB to {rss_end} kB"
    );
}
