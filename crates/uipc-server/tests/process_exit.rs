//! A client process's exit, seen through its pidfd: its SEM_UNDO adjustments are applied and
//! its sleeping call withdrawn before any request that follows the exit is served.

use uipc::ipc::consts::*;
use uipc::ipc::sem::Sembuf;
use uipc_proto::client::Connection;
use uipc_proto::{Request, Response, SemArg};
mod common;

fn getval(c: &Connection, semid: i32, semnum: i32, cmd: i32) -> Response {
    let req = Request::Semctl {
        semid,
        semnum,
        cmd,
        arg: SemArg::None,
    };
    c.call(&req, false).unwrap().0
}

#[test]
fn a_killed_clients_undo_is_applied_before_the_reaper_asks() {
    let (socket, _, c) = common::start_connected("exit", true);
    let id = common::new_sem(&c, 2);
    // SAFETY: the child only makes system calls and allocations (glibc's malloc is fork-safe)
    // and leaves with _exit.
    let (child, ready) = unsafe { common::fork_with_pipe() };
    if child == 0 {
        let code = (|| {
            let c = Connection::connect(&socket, false).ok()?;
            let up = Request::Semtimedop {
                semid: id,
                nsops: 1,
                sops: Some(vec![Sembuf::new(0, 4, SEM_UNDO)]),
                timeout: None,
            };
            (c.call(&up, false).ok()?.0 == Response::Ret(0)).then_some(())?;
            // SAFETY: writes one byte from a live buffer.
            unsafe { libc::write(ready[1], b"x".as_ptr().cast(), 1) };
            let down = Request::Semtimedop {
                semid: id,
                nsops: 1,
                sops: Some(vec![Sembuf::new(1, -1, SEM_UNDO)]),
                timeout: None,
            };
            let _ = c.call(&down, false);
            Some(())
        })();
        // SAFETY: leaves the child without running the test harness's exit path.
        unsafe { libc::_exit(if code.is_some() { 0 } else { 1 }) };
    }
    common::read_byte(ready[0]);
    assert_eq!(getval(&c, id, 0, GETVAL), Response::Ret(4));
    while getval(&c, id, 1, GETNCNT) != Response::Ret(1) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: kills and reaps our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        let mut st = 0;
        assert_eq!(libc::waitpid(child, &mut st, 0), child);
    }
    assert_eq!(getval(&c, id, 0, GETVAL), Response::Ret(0), "undo applied");
    assert_eq!(getval(&c, id, 1, GETNCNT), Response::Ret(0), "sleeper gone");
    for fd in ready {
        // SAFETY: closes our pipe ends.
        unsafe { libc::close(fd) };
    }
}
