//! The daemon under an address-space limit (RLIMIT_AS, 1 GiB) while sixteen users each hold
//! 48 MiB of frames that never finish, more than the limit leaves: allocations fail, and the
//! daemon closes the connections it cannot read for rather than abort; a normal client is
//! served throughout and after.
//!
//! The daemon runs in a child process (this binary again, [`daemon_side`]) with the limit; the
//! flooding users are this binary run again as uids [`FIRST_UID`].. ([`flood_side`]). Needs
//! root; skips otherwise.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};
use uipc_proto::client::Connection;
use uipc_proto::{Response, MAX_FRAME};
#[allow(dead_code)]
mod common;

/// The daemon's address-space limit.
const AS_LIMIT: u64 = 1 << 30;
/// The flooding users: this uid and the next [`USERS`] - 1.
const FIRST_UID: u32 = 61000;
const USERS: u32 = 16;
/// Connections per flooding user, each holding a frame of up to 16 MiB: 48 MiB per user,
/// less than `limits::FRAME_BYTES_PER_UID` lets one user hold, so only the address-space
/// limit closes them.
const CONNS: usize = 3;

/// The daemon with the address-space limit: does nothing unless started by the test.
#[test]
fn daemon_side() {
    common::limited_daemon_side("UIPC_AS_DAEMON", libc::RLIMIT_AS, AS_LIMIT, true);
}

/// One flooding user: does nothing unless started by the test. Each connection says hello,
/// announces a 16 MiB frame and sends all of it but its last byte; prints how many of its
/// connections the daemon closed before that.
#[test]
fn flood_side() {
    let Some(args) = uipc_testkit::role_args("UIPC_AS_FLOOD") else {
        return;
    };
    let path = Path::new(&args[0]);
    let mut socks: Vec<(UnixStream, usize)> = Vec::new();
    for _ in 0..CONNS {
        let s = Connection::connect(path, false).unwrap().into_stream();
        (&s).write_all(&MAX_FRAME.to_le_bytes()).unwrap();
        s.set_nonblocking(true).unwrap();
        socks.push((s, MAX_FRAME as usize - 1));
    }
    let chunk = vec![0x55u8; 256 << 10];
    let mut closed = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) && socks.iter().any(|(_, left)| *left > 0) {
        for (s, left) in socks.iter_mut().filter(|(_, left)| *left > 0) {
            let n = chunk.len().min(*left);
            // SAFETY: a non-blocking send from a live buffer.
            let r = unsafe {
                libc::send(
                    s.as_raw_fd(),
                    chunk.as_ptr().cast(),
                    n,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if r > 0 {
                *left -= r as usize;
            } else if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
            {
                closed += 1;
                *left = 0;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("flood: {closed} closed");
    // Hold the frames a little, while the test checks the daemon.
    std::thread::sleep(Duration::from_secs(2));
}

#[test]
fn under_an_address_space_limit_failed_allocations_close_connections_not_the_daemon() {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = common::traversable_tmp().join(format!("uipc-as-limit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("socket");
    let mut daemon = std::process::Command::new(common::nobody_exe())
        .args(["--exact", "daemon_side", "--nocapture"])
        .env("UIPC_AS_DAEMON", &socket)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_daemon(&socket);
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flood(&socket, &mut daemon)));
    let _ = daemon.kill();
    let out = daemon.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        eprintln!("daemon: {}", String::from_utf8_lossy(&out.stderr));
        std::panic::resume_unwind(e);
    }
}

fn vm_size_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn flood(socket: &Path, daemon: &mut std::process::Child) {
    let good = Connection::connect(socket, false).unwrap();
    let before = vm_size_kb(daemon.id());
    let users: Vec<_> = (0..USERS)
        .map(|i| {
            std::process::Command::new(common::nobody_exe())
                .args(["--exact", "flood_side", "--nocapture", "--test-threads=1"])
                .env("UIPC_AS_FLOOD", socket)
                .current_dir(common::nobody_exe().parent().unwrap())
                .uid(FIRST_UID + i)
                .gid(FIRST_UID + i)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut calls = 0;
    let mut users = users;
    while users.iter_mut().any(|u| u.try_wait().unwrap().is_none()) {
        assert!(
            daemon.try_wait().unwrap().is_none(),
            "the daemon died under the memory limit"
        );
        let resp = common::msgget_private(&good);
        assert!(matches!(resp, Response::Ret(id) if id >= 0), "{resp:?}");
        calls += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut closed = 0;
    for u in users {
        let out = u.wait_with_output().unwrap();
        assert!(out.status.success(), "a flooding user failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let (_, said) = text
            .split_once("flood: ")
            .expect("the flooding user's count");
        closed += said.split(' ').next().unwrap().parse::<usize>().unwrap();
    }
    println!(
        "{calls} calls served; {closed} flooding connections closed by the daemon; its address \
         space {before} kB before the flood"
    );
    assert!(
        closed > 0,
        "the daemon held every frame: the limit was never reached"
    );
    assert!(daemon.try_wait().unwrap().is_none(), "the daemon died");
    let resp = common::msgget_private(&Connection::connect(socket, false).unwrap());
    assert!(matches!(resp, Response::Ret(id) if id >= 0), "{resp:?}");
}
