//! `uipc serve --state FILE`, the real daemon stopped and started again: no acknowledged
//! message lost or duplicated under traffic, sparse segments saved sparse in bounded memory, a
//! restored file consumed before serving, a damaged file refused, SEM_UNDO adjustments
//! neither applied at the save nor kept.
//!
//! Each test runs the `uipc` binary as a child and talks to it with the wire protocol's client.
//! A daemon's peak memory is its `ru_maxrss` from `wait4` (the kernel's high-water mark of its
//! resident set, what `/proc/PID/status` shows as VmHWM while it runs, kept after it exits).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uipc::ipc::consts::*;
use uipc::ipc::msg::MsqidSet;
use uipc::ipc::sem::Sembuf;
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response, SemArg};

static N: AtomicUsize = AtomicUsize::new(0);

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "uipc-serve-state-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Daemon {
    child: Child,
    socket: PathBuf,
    /// Reaped by [`wait4`]: its pid may belong to someone else now.
    reaped: bool,
}

/// A test that panics still ends its daemon: a daemon left running would hold the test
/// harness's output pipe open and hang `cargo test`.
impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A child process killed and reaped when dropped, panic or not (a child left running
/// would hold the test harness's output pipe open).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How a daemon ended: its exit code, its peak resident set in KiB and what it printed.
struct Ended {
    code: Option<i32>,
    max_rss_kib: i64,
    stderr: String,
}

/// `uipc serve` on `dir/socket` with `dir/state`, and `extra` arguments.
fn serve(dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uipc"));
    cmd.arg("serve")
        .arg("--socket")
        .arg(dir.join("socket"))
        .arg("--state")
        .arg(dir.join("state"))
        .args(extra)
        .stderr(Stdio::piped());
    cmd
}

impl Daemon {
    /// Starts `uipc serve` on `dir/socket` with `dir/state` and waits until it answers.
    fn start(dir: &Path, extra: &[&str]) -> Daemon {
        let socket = dir.join("socket");
        let child = serve(dir, extra).spawn().unwrap();
        let mut d = Daemon {
            child,
            socket,
            reaped: false,
        };
        let t0 = Instant::now();
        while Connection::connect(&d.socket, false).is_err() {
            if let Ok(Some(_)) = d.child.try_wait() {
                panic!("the daemon exited: {}", d.stderr_now());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "daemon never answered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        d
    }

    fn stderr_now(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    fn connect(&self) -> Connection {
        Connection::connect(&self.socket, false).unwrap()
    }

    /// Sends `sig` and reaps the daemon with `wait4`.
    fn stop(mut self, sig: i32) -> Ended {
        let pid = self.child.id() as i32;
        // SAFETY: signals our own child, which has not been reaped.
        unsafe { libc::kill(pid, sig) };
        wait4(pid, &mut self)
    }
}

fn wait4(pid: i32, d: &mut Daemon) -> Ended {
    let mut status = 0;
    // SAFETY: zeroed rusage is valid output space.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own child into live output variables.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    d.reaped = true;
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Ended {
        code,
        max_rss_kib: ru.ru_maxrss,
        stderr: d.stderr_now(),
    }
}

/// Runs the daemon with `extra` expecting it to refuse to start: it must exit within 10 s
/// (one that starts is stopped, and reported as started: code `None`).
fn run_to_end(dir: &Path, extra: &[&str]) -> Ended {
    let mut child = serve(dir, extra).spawn().unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = child.try_wait().unwrap().is_none();
    if started {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    Ended {
        code: if started { None } else { out.status.code() },
        max_rss_kib: 0,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn call(c: &Connection, req: Request) -> std::io::Result<Response> {
    c.call(&req, false).map(|(r, _)| r)
}

fn ret(c: &Connection, req: Request) -> i32 {
    match call(c, req).unwrap() {
        Response::Ret(v) => v as i32,
        other => panic!("{other:?}"),
    }
}

fn msgget(c: &Connection, key: i32, flag: i32) -> i32 {
    ret(c, Request::Msgget { key, flag })
}

fn shmget(c: &Connection, key: i32, size: u64, flag: i32) -> i32 {
    ret(c, Request::Shmget { key, size, flag })
}

/// shmat at address 0 with `flags`: the segment's memfd (the attach must succeed).
fn attach(c: &Connection, id: i32, flags: i32) -> Option<std::os::fd::OwnedFd> {
    let (resp, fd) = c
        .call(
            &Request::Shmat {
                shmid: id,
                addr: 0,
                flags,
            },
            false,
        )
        .unwrap();
    assert!(matches!(resp, Response::ShmAttached { .. }), "{resp:?}");
    fd
}

fn semget(c: &Connection, key: i32, nsems: i32, flag: i32) -> i32 {
    ret(c, Request::Semget { key, nsems, flag })
}

const KEY_Q: i32 = 0x57a7e;
const KEY_S: i32 = 0x57a7f;

#[derive(Default)]
struct Ledger {
    /// Messages whose msgsnd was answered with success.
    acked: HashSet<u64>,
    /// Messages whose msgsnd was sent, answered or not.
    attempted: HashSet<u64>,
    /// Every message received, in order of receipt (a duplicate appears twice).
    received: Vec<u64>,
    /// semops (+1 on both semaphores) answered with success, and sent.
    sem_acked: u64,
    sem_attempted: u64,
}

const SENDERS: u64 = 3;
const RECEIVERS: usize = 2;
const SEM_BUDGET: u64 = 2000;

fn sender(path: PathBuf, me: u64, next: Arc<Mutex<HashMap<u64, u64>>>, ledger: Arc<Mutex<Ledger>>) {
    let Ok(c) = Connection::connect(&path, false) else {
        return;
    };
    let q = msgget(&c, KEY_Q, 0);
    let s = semget(&c, KEY_S, 0, 0);
    loop {
        let n = {
            let mut next = next.lock().unwrap();
            let n = next.entry(me).or_insert(0);
            *n += 1;
            *n
        };
        let seq = (me << 32) | n;
        ledger.lock().unwrap().attempted.insert(seq);
        let sent = call(
            &c,
            Request::Msgsnd {
                msqid: q,
                mtype: 1 + (seq % 3) as i64,
                msgsz: 8,
                text: Some(seq.to_le_bytes().to_vec()),
                flags: 0,
            },
        );
        match sent {
            Ok(Response::Ret(0)) => {
                ledger.lock().unwrap().acked.insert(seq);
            }
            _ => return,
        }
        if n % 4 == 0 && ledger.lock().unwrap().sem_attempted < SEM_BUDGET {
            ledger.lock().unwrap().sem_attempted += 1;
            let op = Request::Semtimedop {
                semid: s,
                nsops: 2,
                sops: Some(vec![Sembuf::new(0, 1, 0), Sembuf::new(1, 1, 0)]),
                timeout: None,
            };
            match call(&c, op) {
                Ok(Response::Ret(0)) => ledger.lock().unwrap().sem_acked += 1,
                _ => return,
            }
        }
    }
}

fn receiver(path: PathBuf, ledger: Arc<Mutex<Ledger>>) {
    let Ok(c) = Connection::connect(&path, false) else {
        return;
    };
    let q = msgget(&c, KEY_Q, 0);
    loop {
        // A blocking receive: parked in the daemon until a sender's message completes it.
        let got = call(
            &c,
            Request::Msgrcv {
                msqid: q,
                maxsize: 64,
                msgtyp: 0,
                flags: 0,
            },
        );
        match got {
            Ok(Response::Msg { text, .. }) => {
                let seq = u64::from_le_bytes(text.try_into().unwrap());
                ledger.lock().unwrap().received.push(seq);
            }
            _ => return,
        }
    }
}

#[test]
fn acknowledged_messages_survive_ten_save_restore_rounds_under_traffic_exactly_once() {
    let dir = scratch("traffic");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next = Arc::new(Mutex::new(HashMap::new()));
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    for round in 0..10 {
        let d = Daemon::start(&dir, &[]);
        if round == 0 {
            let c = d.connect();
            let q = msgget(&c, KEY_Q, IPC_CREAT | 0o600);
            // A small queue, so senders park too (msgsnd woken to retry).
            let set = MsqidSet {
                uid: 0,
                gid: 0,
                mode: 0o600,
                qbytes: 256,
            };
            let r = call(
                &c,
                Request::Msgctl {
                    msqid: q,
                    cmd: IPC_SET,
                    set: Some(set),
                },
            );
            assert!(matches!(r, Ok(Response::Ret(0))), "{r:?}");
            semget(&c, KEY_S, 2, IPC_CREAT | 0o600);
        }
        let mut threads = Vec::new();
        for me in 0..SENDERS {
            let (p, n, l) = (d.socket.clone(), next.clone(), ledger.clone());
            threads.push(std::thread::spawn(move || sender(p, me, n, l)));
        }
        for _ in 0..RECEIVERS {
            let (p, l) = (d.socket.clone(), ledger.clone());
            threads.push(std::thread::spawn(move || receiver(p, l)));
        }
        std::thread::sleep(Duration::from_millis(80 + rng.u64(..160)));
        let end = d.stop(libc::SIGTERM);
        assert_eq!(end.code, Some(0), "round {round}: {}", end.stderr);
        for t in threads {
            t.join().unwrap();
        }
    }
    // The last state: drain what is still queued.
    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    let q = msgget(&c, KEY_Q, 0);
    let mut l = ledger.lock().unwrap();
    loop {
        let r = call(
            &c,
            Request::Msgrcv {
                msqid: q,
                maxsize: 64,
                msgtyp: 0,
                flags: IPC_NOWAIT,
            },
        )
        .unwrap();
        match r {
            Response::Msg { text, .. } => l
                .received
                .push(u64::from_le_bytes(text.try_into().unwrap())),
            Response::Error(e) if e == libc::ENOMSG => break,
            other => panic!("{other:?}"),
        }
    }
    let s = semget(&c, KEY_S, 0, 0);
    let values = match call(
        &c,
        Request::Semctl {
            semid: s,
            semnum: 0,
            cmd: GETALL,
            arg: SemArg::None,
        },
    ) {
        Ok(Response::SemAll(v)) => v,
        other => panic!("{other:?}"),
    };
    d.stop(libc::SIGTERM);

    let mut seen = HashSet::new();
    let duplicated: Vec<_> = l.received.iter().filter(|s| !seen.insert(**s)).collect();
    let lost: Vec<_> = l.acked.iter().filter(|s| !seen.contains(s)).collect();
    let invented: Vec<_> = seen.iter().filter(|s| !l.attempted.contains(s)).collect();
    assert!(
        l.acked.len() > 1000,
        "too little traffic: {}",
        l.acked.len()
    );
    assert!(
        duplicated.is_empty() && lost.is_empty() && invented.is_empty(),
        "{} acknowledged, {} received: {} duplicated, {} lost, {} invented",
        l.acked.len(),
        l.received.len(),
        duplicated.len(),
        lost.len(),
        invented.len()
    );
    eprintln!(
        "{} messages acknowledged, {} received, {} semops acknowledged",
        l.acked.len(),
        l.received.len(),
        l.sem_acked
    );
    let v = u64::from(values[0]);
    assert_eq!(
        values[0], values[1],
        "a semop applied to one semaphore only"
    );
    assert!(
        l.sem_acked <= v && v <= l.sem_attempted,
        "semaphore {v}, {} acknowledged, {} sent",
        l.sem_acked,
        l.sem_attempted
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const GIB: u64 = 1 << 30;

#[test]
fn a_sparse_gibibyte_segment_is_saved_in_bounded_memory_to_a_small_file() {
    let dir = scratch("sparse");
    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    let id = shmget(&c, 0x5ba75e, GIB, IPC_CREAT | 0o600);
    let fd = attach(&c, id, 0);
    let mem = std::fs::File::from(fd.expect("the segment's memfd"));
    let marks: [(u64, &[u8]); 3] = [(0, b"first"), (GIB / 2 + 3, b"middle"), (GIB - 4, b"last")];
    for (at, bytes) in marks {
        mem.write_all_at(bytes, at).unwrap();
    }
    drop(mem);
    drop(c);
    let t0 = Instant::now();
    let end = d.stop(libc::SIGTERM);
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    let size = std::fs::metadata(dir.join("state")).unwrap().len();
    eprintln!(
        "1 GiB segment: saved in {:?} to {size} bytes, daemon peak RSS {} KiB",
        t0.elapsed(),
        end.max_rss_kib
    );
    assert!(
        end.max_rss_kib < 64 << 10,
        "the daemon's peak resident set was {} KiB",
        end.max_rss_kib
    );
    let size = std::fs::metadata(dir.join("state")).unwrap().len();
    assert!(
        size < 64 << 10,
        "a 1 GiB segment with 15 bytes written saved as {size} bytes"
    );

    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    let id = shmget(&c, 0x5ba75e, 0, 0);
    let fd = attach(&c, id, SHM_RDONLY);
    let mem = std::fs::File::from(fd.unwrap());
    for (at, bytes) in marks {
        let mut back = vec![0u8; bytes.len()];
        mem.read_exact_at(&mut back, at).unwrap();
        assert_eq!(back, bytes);
    }
    // SAFETY: zeroed stat is valid output space; the descriptor is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fstat(mem.as_raw_fd(), &mut st) }, 0);
    assert!(
        st.st_blocks * 512 < 1 << 20,
        "restored with {} blocks",
        st.st_blocks
    );
    let end = d.stop(libc::SIGTERM);
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

fn queue_count(d: &Daemon) -> i32 {
    let c = d.connect();
    match call(
        &c,
        Request::Msgctl {
            msqid: 0,
            cmd: MSG_INFO,
            set: None,
        },
    ) {
        Ok(Response::MsgInfo { info, .. }) => info.msgpool,
        other => panic!("{other:?}"),
    }
}

/// A daemon on `dir` given a queue with key `key` holding `text`, then stopped: the state
/// file holds them. Returns the queue's id.
fn saved_with_a_message(dir: &Path, key: i32, text: &[u8]) -> i32 {
    let d = Daemon::start(dir, &[]);
    let c = d.connect();
    let q = msgget(&c, key, IPC_CREAT | 0o600);
    let send = Request::Msgsnd {
        msqid: q,
        mtype: 7,
        msgsz: text.len() as u64,
        text: Some(text.to_vec()),
        flags: 0,
    };
    assert!(matches!(call(&c, send), Ok(Response::Ret(0))));
    drop(c);
    assert_eq!(d.stop(libc::SIGTERM).code, Some(0));
    assert!(dir.join("state").exists());
    q
}

#[test]
fn a_restored_state_file_is_consumed_so_a_crash_cannot_bring_it_back() {
    let dir = scratch("consumed");
    let q = saved_with_a_message(&dir, 0x1234, b"old");
    assert!(dir.join("state").exists());

    // Restored, then the message consumed, then a crash (no save).
    let d = Daemon::start(&dir, &[]);
    assert!(
        !dir.join("state").exists(),
        "the restored file is still in place while serving"
    );
    let c = d.connect();
    let got = call(
        &c,
        Request::Msgrcv {
            msqid: q,
            maxsize: 16,
            msgtyp: 0,
            flags: IPC_NOWAIT,
        },
    );
    assert!(matches!(got, Ok(Response::Msg { .. })), "{got:?}");
    drop(c);
    d.stop(libc::SIGKILL);

    let d = Daemon::start(&dir, &[]);
    assert_eq!(
        queue_count(&d),
        0,
        "the consumed message came back after a crash"
    );
    let end = d.stop(libc::SIGTERM);
    assert!(
        end.stderr.contains("consumed"),
        "no word about the crash: {}",
        end.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `bytes` as its state file, the daemon exits non-zero and says `why`.
fn refused_to_start(dir: &Path, bytes: &[u8], why: &str) {
    std::fs::write(dir.join("state"), bytes).unwrap();
    let end = run_to_end(dir, &[]);
    assert!(matches!(end.code, Some(c) if c != 0), "started ({why})");
    assert!(end.stderr.contains(why), "{}", end.stderr);
}

#[test]
fn a_damaged_state_file_stops_the_daemon_unless_told_to_discard_it() {
    let dir = scratch("damaged");
    saved_with_a_message(&dir, 0x4321, b"hello");
    let path = dir.join("state");
    let good = std::fs::read(&path).unwrap();
    // One bit of the message's text flipped.
    let at = good
        .windows(5)
        .position(|w| w == b"hello")
        .expect("the text is in the file");
    let mut bad = good.clone();
    bad[at] ^= 0x20;
    refused_to_start(&dir, &bad, "checksum");
    assert!(!dir.join("socket").exists());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bad,
        "the damaged file is kept as it was"
    );

    let mut short = good.clone();
    short.truncate(good.len() - 1);
    refused_to_start(&dir, &short, "truncated");

    let d = Daemon::start(&dir, &["--state-discard-damaged"]);
    assert_eq!(queue_count(&d), 0);
    let end = d.stop(libc::SIGTERM);
    assert!(end.stderr.contains("damaged"), "{}", end.stderr);
    let kept = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("state.damaged"));
    assert!(kept, "the damaged file is moved aside, not deleted");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `uipc serve` on `dir` with its stderr in `dir/stderr`, once it answers.
fn start_logged(dir: &Path) -> Daemon {
    let log = std::fs::File::create(dir.join("stderr")).unwrap();
    let child = serve(dir, &[]).stderr(log).spawn().unwrap();
    let d = Daemon {
        child,
        socket: dir.join("socket"),
        reaped: false,
    };
    let t0 = Instant::now();
    while Connection::connect(&d.socket, false).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no daemon");
        std::thread::sleep(Duration::from_millis(5));
    }
    d
}

/// Sends `sig` to a daemon whose save will fail and waits until it says so. That it stays up
/// is for the caller to show by what the same daemon does next (a later save, SIGQUIT's exit
/// status and message), not by a look after a pause, which a late exit would pass.
fn save_fails(d: &mut Daemon, dir: &Path, sig: i32) {
    // SAFETY: signals our own child, not yet reaped.
    unsafe { libc::kill(d.child.id() as i32, sig) };
    let log = dir.join("stderr");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log).unwrap().contains("FAILED") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no word of the failure"
        );
        assert!(d.child.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_failed_save_keeps_the_objects_until_a_save_succeeds_or_sigquit() {
    let dir = scratch("failed");
    let state = dir.join("state");
    let d = start_logged(&dir);
    let c = d.connect();
    let q = msgget(&c, 0x5afe, IPC_CREAT | 0o600);
    let send = Request::Msgsnd {
        msqid: q,
        mtype: 1,
        msgsz: 4,
        text: Some(b"kept".to_vec()),
        flags: 0,
    };
    assert!(matches!(call(&c, send), Ok(Response::Ret(0))));
    drop(c);
    // A directory where the file goes: the rename over it fails.
    std::fs::create_dir(&state).unwrap();
    let mut d = d;
    save_fails(&mut d, &dir, libc::SIGTERM);
    // The cause fixed, the next signal saves.
    std::fs::remove_dir(&state).unwrap();
    let end = d.stop(libc::SIGTERM);
    assert_eq!(end.code, Some(0));
    assert!(state.is_file(), "nothing saved after the retry");

    // Restored (the file consumed), then a failed save ended by SIGQUIT: exit status 1, and
    // the consumed file, the state it started from, is still there to move back.
    let mut d = start_logged(&dir);
    assert_eq!(
        queue_count(&d),
        1,
        "the message did not survive the retried save"
    );
    std::fs::create_dir(&state).unwrap();
    save_fails(&mut d, &dir, libc::SIGINT);
    let end = d.stop(libc::SIGQUIT);
    assert_eq!(end.code, Some(1));
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(log.contains("without saving"), "{log}");
    assert!(dir.join("state.consumed").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The client side of the next test, run in a new kernel IPC namespace (`unshare --ipc`):
/// makes a queue and a semaphore set on the daemon at `$UIPC_NS_CLIENT`, says "ready" and
/// waits to be killed. Does nothing without the variable.
#[test]
fn ns_client_side() {
    let Some(socket) = std::env::var_os("UIPC_NS_CLIENT") else {
        return;
    };
    let c = Connection::connect(Path::new(&socket), false).unwrap();
    msgget(&c, IPC_PRIVATE, IPC_CREAT | 0o600);
    let set = Request::Semget {
        key: IPC_PRIVATE,
        nsems: 1,
        flag: IPC_CREAT | 0o600,
    };
    ret(&c, set);
    println!("ready");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_save_names_the_other_namespaces_it_does_not_save() {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        return; // unshare --ipc needs root
    }
    let dir = scratch("otherns");
    let d = start_logged(&dir);
    msgget(&d.connect(), 0x0e5, IPC_CREAT | 0o600);
    let mut client = Command::new("unshare")
        .arg("--ipc")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ns_client_side",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("UIPC_NS_CLIENT", &d.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(client.stdout.take().unwrap());
    let client = Reaped(client);
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the client in another namespace never got ready");
    }
    let end = d.stop(libc::SIGTERM);
    drop(client);
    assert_eq!(end.code, Some(0));
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(
        log.contains("NOT saved") && log.contains("1 semaphore sets, 1 queues, 0 segments"),
        "{log}"
    );
    assert!(log.contains("ipc:["), "{log}");
    // The daemon's own namespace was saved.
    let d = Daemon::start(&dir, &[]);
    assert_eq!(queue_count(&d), 1);
    d.stop(libc::SIGTERM);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A test that panics with a daemon running leaves no daemon behind (it would hold the test
/// harness's output pipe open and hang `cargo test`): the daemon is killed and reaped.
#[test]
fn a_panicking_test_leaves_no_daemon_behind() {
    let dir = scratch("panic");
    let pid = Arc::new(Mutex::new(0));
    let seen = pid.clone();
    let dir2 = dir.clone();
    let r = std::panic::catch_unwind(move || {
        let d = Daemon::start(&dir2, &[]);
        *seen.lock().unwrap() = d.child.id() as i32;
        panic!("a failing test");
    });
    assert!(r.is_err());
    let pid = *pid.lock().unwrap();
    assert!(pid > 0);
    // SAFETY: signal 0 only asks whether the pid exists; a reaped child's pid is gone (it
    // could only be reused by a process started since, which this test does not expect).
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if alive {
        // SAFETY: our own child, not reaped: end it so the harness does not hang.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(!alive, "the daemon of a panicking test is still there");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `sig` and reaps the daemon, failing (and killing it) if it has not exited within
/// `limit`.
fn stop_within(mut d: Daemon, sig: i32, limit: Duration) -> Ended {
    let pid = d.child.id() as i32;
    // SAFETY: signals our own child, which has not been reaped.
    unsafe { libc::kill(pid, sig) };
    let t0 = Instant::now();
    while d.child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < limit,
            "the daemon did not exit within {limit:?} of signal {sig}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    d.reaped = true;
    let code = d.child.try_wait().unwrap().and_then(|s| s.code());
    Ended {
        code,
        max_rss_kib: 0,
        stderr: d.stderr_now(),
    }
}

/// A client that attached at address 0 and never reported where it mapped the segment
/// (`ShmMoved`), its connection still open: the daemon still stops on SIGTERM and saves the
/// segment, and the restored segment has no attachments.
#[test]
fn a_client_stalled_after_shmat_does_not_keep_the_daemon_from_stopping() {
    let dir = scratch("stalled-shmat");
    let d = Daemon::start(&dir, &[]);
    let c = Connection::connect(&d.socket, true).unwrap();
    let id = shmget(&c, 0x57a11, 4096, IPC_CREAT | 0o600);
    let fd = attach(&c, id, 0);
    let mem = std::fs::File::from(fd.expect("the segment's memfd"));
    mem.write_all_at(b"kept", 0).unwrap();
    let end = stop_within(d, libc::SIGTERM, Duration::from_secs(20));
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    drop((c, mem));

    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    let id = shmget(&c, 0x57a11, 0, 0);
    let fd = attach(&c, id, SHM_RDONLY);
    let mut back = [0u8; 4];
    std::fs::File::from(fd.unwrap())
        .read_exact_at(&mut back, 0)
        .unwrap();
    assert_eq!(&back, b"kept");
    let end = d.stop(libc::SIGTERM);
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

fn semval(c: &Connection, semid: i32, semnum: i32) -> i32 {
    let get = Request::Semctl {
        semid,
        semnum,
        cmd: GETVAL,
        arg: SemArg::None,
    };
    ret(c, get)
}

/// The client side of the next test: with `UIPC_UNDO_CLIENT` set to "SOCKET SEMID SEMNUM",
/// takes that semaphore with SEM_UNDO and says "held"; after a line on stdin (or its end),
/// connects again, says the value it sees, and exits at end of input. Does nothing without
/// the variable.
#[test]
fn undo_client_side() {
    let Some(args) = uipc_testkit::role_args("UIPC_UNDO_CLIENT") else {
        return;
    };
    let socket = Path::new(&args[0]);
    let (semid, semnum): (i32, u16) = (args[1].parse().unwrap(), args[2].parse().unwrap());
    let c = Connection::connect(socket, false).unwrap();
    let op = Request::Semtimedop {
        semid,
        nsops: 1,
        sops: Some(vec![Sembuf::new(semnum, -1, SEM_UNDO)]),
        timeout: None,
    };
    assert!(matches!(call(&c, op), Ok(Response::Ret(0))));
    println!("held");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let c = Connection::connect(socket, false).unwrap();
    println!("sees {}", semval(&c, semid, semnum.into()));
    line.clear();
    while std::io::stdin().read_line(&mut line).unwrap() > 0 {}
}

/// SEM_UNDO across a save and restore, as across a checkpoint and restore of an IPC namespace
/// (README): the saved value is the one the acknowledged semop left, the adjustment is
/// neither applied when the daemon stops nor kept, so the exit after the restore of the
/// process that held the semaphore undoes nothing; a semop with SEM_UNDO made after the
/// restore is undone at its process's exit as usual.
#[test]
fn sem_undo_adjustments_are_neither_applied_at_the_save_nor_kept_after_the_restore() {
    use std::io::{BufRead, BufReader, Write};
    let dir = scratch("undo");
    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    let s = semget(&c, 0x5e40, 2, IPC_CREAT | 0o600);
    let setall = Request::Semctl {
        semid: s,
        semnum: 0,
        cmd: SETALL,
        arg: SemArg::Array(vec![1, 1]),
    };
    assert!(matches!(call(&c, setall), Ok(Response::Ret(0))));
    drop(c);
    let socket = d.socket.clone();
    let spawn = |semnum: u16| {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "undo_client_side",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "UIPC_UNDO_CLIENT",
                format!("{} {s} {semnum}", socket.display()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        (Reaped(child), out)
    };
    let said = |out: &mut BufReader<std::process::ChildStdout>, want: &str| {
        let mut line = String::new();
        while !line.contains(want) {
            line.clear();
            let n = out.read_line(&mut line).unwrap();
            assert!(n > 0, "the client ended before saying {want:?}");
        }
        line.trim().to_string()
    };
    let (mut holder, mut holder_out) = spawn(0);
    said(&mut holder_out, "held");
    assert_eq!(d.stop(libc::SIGTERM).code, Some(0));

    let d = Daemon::start(&dir, &[]);
    let c = d.connect();
    assert_eq!(
        semval(&c, s, 0),
        0,
        "the adjustment was applied at the save"
    );
    // The holder calls the restored daemon, then exits.
    let mut to_holder = holder.0.stdin.take().unwrap();
    writeln!(to_holder, "go").unwrap();
    assert_eq!(said(&mut holder_out, "sees"), "sees 0");
    drop(to_holder);
    assert!(holder.0.wait().unwrap().success());
    // The control: semaphore 1 taken with SEM_UNDO after the restore, then an exit.
    let (mut control, mut control_out) = spawn(1);
    said(&mut control_out, "held");
    drop(control.0.stdin.take());
    assert!(control.0.wait().unwrap().success());
    uipc_testkit::wait_until("the undo of an exit after the restore", || {
        semval(&c, s, 1) == 1
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        semval(&c, s, 0),
        0,
        "the holder's exit after the restore undid its old adjustment"
    );
    d.stop(libc::SIGTERM);
    let _ = std::fs::remove_dir_all(&dir);
}
