//! What the workspace's tests share (a dev-dependency only; nothing here ships):
//!
//! - [`wait_until`]: polls a condition until it holds, failing the test after
//!   [`WAIT_LIMIT`], for tests that wait for another thread or process to reach a state
//!   (a request blocked, a call parked) before they go on;
//! - [`role_args`]: the child side of a test that runs its own test binary again in another
//!   role (another user, a client to kill): the role's words, passed in an environment
//!   variable, or `None` in an ordinary run, where the role's test does nothing.

use std::time::{Duration, Instant};

/// How long [`wait_until`] waits: far longer than any state change takes on a loaded machine
/// (a daemon with thousands of parked calls included).
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Polls `cond` every millisecond until it returns true; panics naming `what` if it has not
/// within [`WAIT_LIMIT`]. `cond` may assert on what it sees on the way.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The space-separated words of environment variable `var`, which a test's parent side sets
/// when it runs the binary again as the role's child; `None` when it is not set.
pub fn role_args(var: &str) -> Option<Vec<String>> {
    let value = std::env::var(var).ok()?;
    Some(value.split(' ').map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn wait_until_returns_once_another_thread_makes_the_condition_hold() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                flag.store(true, Ordering::Release);
            })
        };
        wait_until("the flag", || flag.load(Ordering::Acquire));
        setter.join().unwrap();
    }

    #[test]
    fn role_args_are_none_without_the_variable() {
        assert_eq!(role_args("UIPC_TESTKIT_NEVER_SET"), None);
    }
}
