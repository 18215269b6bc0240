//! The daemon's bounds under load: one unprivileged user opening a thousand connections that
//! send oversized, slow and never-finished frames, and clients that never read their replies,
//! while a normal client keeps being served within 100 ms per call (beyond what the machine's
//! own load adds at the same moment to a call to an idle daemon, the control) and the
//! daemon's memory stays bounded.
//!
//! The daemon runs in this process (its resident size is this process's VmRSS); the hostile
//! user is this binary run again as uid 65534 ([`hostile_side`]). Needs root; skips otherwise.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use uipc::ipc::consts::{GETALL, IPC_CREAT, IPC_PRIVATE};
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response, SemArg, MAX_FRAME};
#[allow(dead_code)]
mod common;

/// The bound checked on the daemon's memory growth: the hostile user's frame budget
/// (`limits::FRAME_BYTES_PER_UID`, 64 MiB) plus room for buffers and bookkeeping.
const RSS_GROWTH_BOUND_KB: u64 = 160 << 10;
/// The longest a normal call may take, every call, beyond what the machine's load adds to a
/// call to an idle daemon at the same moment (the control; on a quiet machine that is
/// nothing).
const CALL_BOUND: Duration = Duration::from_millis(100);

fn vm_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() == 0 }
}

fn msgget(c: &Connection) -> Duration {
    let t = Instant::now();
    let resp = common::msgget_private(c);
    assert!(matches!(resp, Response::Ret(id) if id >= 0), "{resp:?}");
    if let Response::Ret(id) = resp {
        let rm = Request::Msgctl {
            msqid: id as i32,
            cmd: 0,
            set: None,
        };
        c.call(&rm, false).unwrap();
    }
    t.elapsed()
}

/// Sends what the socket takes of `bytes` without waiting; errors (a closed connection)
/// are ignored.
fn push(s: &UnixStream, bytes: &[u8]) {
    // SAFETY: a non-blocking send from a live buffer.
    unsafe {
        libc::send(
            s.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// The hostile user: does nothing unless started by the test.
#[test]
fn hostile_side() {
    let Some(words) = uipc_testkit::role_args("UIPC_NOBODY") else {
        return;
    };
    let path = Path::new(&words[1]);
    let connect = || UnixStream::connect(path).ok();
    let mut socks = Vec::new();
    // 250 greeted connections, each starting a 16 MiB frame and sending 256 KiB of it.
    let chunk = vec![0x55u8; 64 << 10];
    for _ in 0..250 {
        let Ok(c) = Connection::connect(path, false) else {
            continue;
        };
        let s = c.into_stream();
        push(&s, &MAX_FRAME.to_le_bytes());
        socks.push(s);
    }
    // 250 oversized frames before hello, 250 hellos sent a byte at a time, 250 silent.
    for _ in 0..250 {
        if let Some(s) = connect() {
            push(&s, &MAX_FRAME.to_le_bytes());
            socks.push(s);
        }
    }
    let slow_from = socks.len();
    for _ in 0..500 {
        if let Some(s) = connect() {
            socks.push(s);
        }
    }
    println!("hostile: {} connections made", socks.len());
    assert_eq!(socks.len(), 1000, "the hostile side could not connect");
    let hello = common::hello_frame();
    for round in 0..30 {
        for (i, s) in socks.iter().enumerate() {
            if i < slow_from {
                // Oversized and never-finished frames: more payload each round (up to 1 MiB
                // each for the ones never greeted, 256 KiB for the greeted ones).
                if round < if i < 250 { 4 } else { 16 } {
                    push(s, &chunk);
                }
            } else if i < slow_from + 250 && round < hello.len() - 1 {
                push(s, &hello[round..round + 1]);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_thousand_hostile_connections_neither_stall_a_client_nor_grow_the_daemon() {
    if !is_root() {
        return;
    }
    let (path, shared) = common::start_with("load", true);
    let good = Connection::connect(&path, false).unwrap();
    // The control: the same calls to a second daemon that nobody attacks, each right before
    // one to the first, measuring what the machine's own load adds to a call.
    let (idle, _) = common::start_with("idle", false);
    let control = Connection::connect(&idle, false).unwrap();
    for _ in 0..20 {
        msgget(&good);
        msgget(&control);
    }
    let base = vm_rss_kb();
    let mut child = common::nobody("hostile_side", "load", &[path.display().to_string()])
        .spawn()
        .unwrap();
    let mut peak = base;
    // Each round's (ms from the start, control call, call).
    let mut rounds = Vec::new();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(60) {
        let at = t0.elapsed().as_millis();
        let idle_took = msgget(&control);
        let took = msgget(&good);
        rounds.push((at, idle_took, took));
        peak = peak.max(vm_rss_kb());
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the hostile side failed");
    // A call's excess: its time less the longest control call of its own and the next
    // rounds (the machine stalled them alike).
    let excess = |i: usize| {
        let stalled = rounds[i.saturating_sub(1)..(i + 2).min(rounds.len())]
            .iter()
            .map(|r| r.1)
            .max()
            .unwrap();
        rounds[i].2.saturating_sub(stalled)
    };
    let calls = rounds.len();
    let worst = rounds.iter().map(|r| r.2).max().unwrap_or_default();
    let worst_control = rounds.iter().map(|r| r.1).max().unwrap_or_default();
    let worst_excess = (0..calls).map(excess).max().unwrap_or_default();
    let slow: Vec<_> = rounds
        .iter()
        .filter(|r| r.2 > CALL_BOUND / 3 || r.1 > CALL_BOUND / 3)
        .map(|r| (r.0, r.1.as_millis(), r.2.as_millis()))
        .collect();
    println!(
        "{calls} calls, worst {worst:?} (control {worst_control:?}, excess over the control \
         {worst_excess:?}); (at ms, control ms, took ms) over {:?}: {slow:?}; RSS {base} kB -> \
         peak {peak} kB; {} connections left",
        CALL_BOUND / 3,
        shared.reactor.connections()
    );
    assert!(calls > 100, "the test ran too short");
    assert!(
        worst_excess < CALL_BOUND,
        "a normal call took {worst_excess:?} more than the control calls beside it"
    );
    assert!(
        peak - base < RSS_GROWTH_BOUND_KB,
        "daemon RSS grew from {base} kB to {peak} kB"
    );
    msgget(&good);
}

#[test]
fn clients_that_never_read_their_replies_hold_no_worker() {
    let (path, _) = common::start_with("slowread", false);
    let good = Connection::connect(&path, false).unwrap();
    let Response::Ret(semid) = good
        .call(
            &Request::Semget {
                key: IPC_PRIVATE,
                nsems: 32000,
                flag: IPC_CREAT | 0o600,
            },
            false,
        )
        .unwrap()
        .0
    else {
        panic!("semget")
    };
    let getall = Request::Semctl {
        semid: semid as i32,
        semnum: 0,
        cmd: GETALL,
        arg: SemArg::None,
    }
    .encode();
    // Five clients each queue forty 64 000-byte replies and never read them: far more than
    // their sockets hold.
    let mut readers = Vec::new();
    for _ in 0..5 {
        let s = Connection::connect(&path, false).unwrap().into_stream();
        let mut burst = Vec::new();
        for _ in 0..40 {
            burst.extend_from_slice(&(getall.len() as u32).to_le_bytes());
            burst.extend_from_slice(&getall);
        }
        s.set_nonblocking(true).unwrap();
        let _ = (&s).write_all(&burst);
        readers.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut worst = Duration::ZERO;
    for _ in 0..50 {
        worst = worst.max(msgget(&good));
    }
    println!("worst call beside five non-readers: {worst:?}");
    assert!(worst < CALL_BOUND, "a normal call took {worst:?}");
    // Each non-reader lost its connection: its socket reads end of file after the replies
    // that fit.
    for s in &readers {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0;
        loop {
            match std::io::Read::read(&mut &*s, &mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Ok(n) => total += n,
                Err(e) => panic!("a non-reader kept its connection ({total} bytes read): {e}"),
            }
        }
        assert!(total < 40 * 64_000, "all forty replies were sent");
    }
}
