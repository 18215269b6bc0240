//! The host kernel's timer column (`uipc bench timers`): past RLIMIT_SIGPENDING's hard limit
//! the kernel refuses a timer, and the note must give the true cause, which depends on whether
//! this process holds CAP_SYS_RESOURCE (a container may drop it even for root).

use uipc_bench::kernel::timers_in_child;
use uipc_bench::scenarios::timers::refused_note;

/// Whether CAP_SYS_RESOURCE (bit 24) is in this process's capability set `set` ("CapEff:").
fn has_sys_resource(set: &str) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(set))
        .expect("capability line")
        .trim();
    u64::from_str_radix(hex, 16).expect("hex") & (1 << 24) != 0
}

fn sigpending_hard_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit for getrlimit to fill.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_SIGPENDING, &mut lim) },
        0
    );
    lim.rlim_max
}

#[test]
fn a_few_timers_are_measured() {
    let (create, lookup) = timers_in_child(1, 100).expect("100 timers");
    assert!(create > 0.0 && lookup > 0.0);
}

#[test]
fn past_the_hard_limit_the_timers_are_measured_or_the_true_cause_is_told() {
    let hard = sigpending_hard_limit();
    if hard > 1 << 20 {
        // Unlimited or huge: nothing to cross in a test's time.
        return;
    }
    let n = hard as i32 + 1;
    let got = timers_in_child(1, n);
    if has_sys_resource("CapEff:") {
        // Root with the capability: the child raises the hard limit and the kernel holds all.
        got.expect("with CAP_SYS_RESOURCE the limit is raised");
        return;
    }
    let refused = got.expect_err("past the hard limit without CAP_SYS_RESOURCE");
    assert_eq!(refused.hard_limit, hard);
    assert_eq!(refused.raise_errno, libc::EPERM);
    assert_eq!(refused.errno, libc::EAGAIN);
    // The count is per user: other processes of this user may hold some of it.
    assert!(refused.created as u64 <= hard, "{refused:?}");
    let note = refused_note(&refused);
    eprintln!("note: {note}");
    assert!(
        note.contains(&format!("hard limit here is {hard}")),
        "{note}"
    );
    assert!(note.contains("raising it failed with EPERM"), "{note}");
    assert!(note.contains("EAGAIN"), "{note}");
    let bounding = if has_sys_resource("CapBnd:") {
        "not in this process's effective set"
    } else {
        "not even in this process's capability bounding set"
    };
    assert!(note.contains(bounding), "{note}");
}
