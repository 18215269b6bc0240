//! The POSIX timer id counter carried over execve (`--timers`), and the library's own
//! variables put back into an environment that lacks them.
//!
//! A program that executes another with an empty or rebuilt environment (`env -i`, envp =
//! {NULL}, test harnesses) would drop the library: the new image's calls would reach the
//! kernel. So the constructor remembers this image's `LD_PRELOAD`, `UIPC_SOCKET`,
//! `UIPC_LOCKS` and `UIPC_TIMERS` ([`keep_own_vars`]) and each exec adds those the new
//! environment lacks (by name; a variable present with another value is left as it is).
//!
//! Linux keeps a process's timer id counter in `signal_struct`, which survives execve: on the
//! 6.18 host, ids 0 and 1 before an exec, 2 for the first timer after it. The preload's timer
//! table lives in the program image and dies with it, so the library's exec functions
//! (`exec.rs`) hand the counter to the next image in its environment, as the first entry
//! `UIPC_TIMER_NEXT_ID=PID:NEXT`, and the library's constructor in the new image takes it
//! ([`take_inherited`]) and removes it from `environ` before the program runs; the timer
//! service starts its table there ([`inherited_next_id`]).
//!
//! The pid makes the value that of one process: an image whose pid differs (the variable
//! passed through a program that runs without the library, and then a child of it) ignores it.
//! Forked and vforked children, which start at 0 on Linux (checked on the host: a forked
//! child's first id is 0, a vforked child's new image's too), never pass a value: they have no
//! service of their own and the inherited value names their parent's pid.
//!
//! The sysctl descriptors open for writing (`procwrite.rs`) go the same way, as a second entry
//! built by [`crate::procwrite::carried_var`] and taken by its constructor; and so does
//! `UIPC_EXEC_DETACH=PID`, a third, when the exec'ing process (not a vforked child) holds
//! shared memory attachments: the new image's constructor (`exec.rs`) then greets the
//! daemon at once, which applies the exec (the attachments' detach), as Linux detaches them
//! during execve, instead of at the image's first call.
//!
//! The new environment is built without malloc (a vforked child shares its parent's heap,
//! and execve is async-signal-safe): an anonymous mapping holds the variable and a copy of
//! the caller's pointer array, read with `process_vm_readv` so that an unreadable `envp`
//! makes no crash: the call then goes to the kernel as given, which answers EFAULT. After a
//! failed exec the mapping is unmapped; the caller's environment is never touched.

use libc::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The variable's name; its value is `PID:NEXT` in decimal.
const NAME: &std::ffi::CStr = c"UIPC_TIMER_NEXT_ID";

/// The counter this image was given: `pid << 32 | next` (0: none).
static INHERITED: AtomicU64 = AtomicU64::new(0);

/// This process's pid, asked of the kernel.
pub(crate) fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail (raw: other preloads may wrap it).
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// `PID:NEXT` as two numbers.
fn parse(value: &[u8]) -> Option<(i32, u32)> {
    let text = std::str::from_utf8(value).ok()?;
    let (pid, next) = text.split_once(':')?;
    Some((pid.parse().ok()?, next.parse().ok()?))
}

/// Whether POSIX timers are served in this image (`$UIPC_TIMERS=1` when it started; read
/// once).
pub fn timers_routed() -> bool {
    static ROUTED: OnceLock<bool> = OnceLock::new();
    *ROUTED.get_or_init(|| std::env::var_os("UIPC_TIMERS").is_some_and(|v| v == "1"))
}

/// Reads the variable and removes it from `environ`; called by the library's constructor,
/// before the program runs.
pub fn take_inherited() {
    // SAFETY: getenv with a NUL-terminated name, at load time (no other thread yet).
    let value = unsafe { libc::getenv(NAME.as_ptr()) };
    if value.is_null() {
        return;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string in the environment.
    let value = unsafe { std::ffi::CStr::from_ptr(value) };
    if let Some((pid, next)) = parse(value.to_bytes()).filter(|&(pid, _)| pid > 0) {
        INHERITED.store(((pid as u64) << 32) | u64::from(next), Ordering::Relaxed);
    }
    // SAFETY: unsetenv with a NUL-terminated name, at load time; removes every entry.
    unsafe { libc::unsetenv(NAME.as_ptr()) };
}

/// `UIPC_EXEC_DETACH=`: the previous image of this process held shared memory attachments,
/// which the exec dropped; its value is the pid.
pub(crate) const DETACH: &[u8] = b"UIPC_EXEC_DETACH=";

/// The counter the previous image of process `pid` handed over (0 if none).
pub fn inherited_next_id(pid: i32) -> u32 {
    let v = INHERITED.load(Ordering::Relaxed);
    if v >> 32 == pid as u64 {
        v as u32
    } else {
        0
    }
}

/// The variables that make a new image a client of the same daemon, as this image started with
/// them: `NAME=value` and a NUL each, made by the library's constructor ([`keep_own_vars`]).
static KEPT: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();

/// Their names, each with its `=`.
const KEPT_NAMES: [&[u8]; 4] = [
    b"LD_PRELOAD=",
    b"UIPC_SOCKET=",
    b"UIPC_LOCKS=",
    b"UIPC_TIMERS=",
];

/// Remembers this image's own values of [`KEPT_NAMES`] (those set and not empty), when calls
/// go to a daemon; called by the library's constructor.
pub fn keep_own_vars() {
    KEPT.get_or_init(|| {
        if !crate::conn::enabled() {
            return Vec::new();
        }
        KEPT_NAMES
            .iter()
            .filter_map(|name| {
                let bare = &name[..name.len() - 1];
                let key = std::ffi::CString::new(bare).ok()?;
                // SAFETY: getenv with a NUL-terminated name, at load time.
                let value = unsafe { libc::getenv(key.as_ptr()) };
                if value.is_null() {
                    return None;
                }
                // SAFETY: a non-null getenv result is a NUL-terminated string.
                let value = unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes_with_nul();
                (value.len() > 1).then(|| [*name, value].concat())
            })
            .collect()
    });
}

/// The kept variables an environment lacks: up to four, without allocating (exec runs in
/// vforked children).
struct Missing {
    list: [&'static [u8]; KEPT_NAMES.len()],
    len: usize,
}

impl Missing {
    fn len(&self) -> usize {
        self.len
    }
}

impl IntoIterator for Missing {
    type Item = &'static [u8];
    type IntoIter = std::iter::Take<std::array::IntoIter<&'static [u8], 4>>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter().take(self.len)
    }
}

/// Which kept variables the `entries` pointers at `envp` lack (each entry's name read
/// safely); `None` if an entry cannot be read.
fn kept_missing(envp: usize, entries: usize) -> Option<Missing> {
    let kept = KEPT.get().map_or(&[][..], Vec::as_slice);
    let mut missing: [bool; KEPT_NAMES.len()] = [false; KEPT_NAMES.len()];
    let mut any = false;
    for (k, entry) in kept.iter().enumerate() {
        missing[k] = true;
        any |= entry.len() > 1;
    }
    let mut out = Missing {
        list: [&[]; KEPT_NAMES.len()],
        len: 0,
    };
    if !any {
        return Some(out);
    }
    let mut ptrs = [0usize; 64];
    let mut done = 0;
    while done < entries {
        let n = (entries - done).min(ptrs.len());
        if read_into(envp + done * 8, ptrs.as_mut_ptr().cast(), n * 8)? != n * 8 {
            return None;
        }
        for &p in &ptrs[..n] {
            let mut name = [0u8; 16];
            let got = read_prefix(p, &mut name);
            for (k, entry) in kept.iter().enumerate() {
                let want = &entry[..entry.iter().position(|&b| b == b'=').unwrap_or(0) + 1];
                if got >= want.len() && name[..want.len()] == *want {
                    missing[k] = false;
                }
            }
        }
        done += n;
    }
    for (entry, _) in kept.iter().zip(missing).filter(|(_, m)| *m) {
        out.list[out.len] = entry.as_slice();
        out.len += 1;
    }
    Some(out)
}

/// Copies up to `out.len()` bytes of the string at `addr` (fewer at the end of readable
/// memory); how many.
fn read_prefix(addr: usize, out: &mut [u8]) -> usize {
    vm_read(addr, out.as_mut_ptr().cast(), out.len())
}

/// How many pointers come before the NULL ending the array at `envp`, read safely; `None`
/// if part of it cannot be read.
fn count_entries(envp: usize) -> Option<usize> {
    let mut chunk = [0usize; 128];
    let mut n = 0usize;
    loop {
        let at = envp.checked_add(n * 8)?;
        let got = read_into(at, chunk.as_mut_ptr().cast(), std::mem::size_of_val(&chunk))? / 8;
        if let Some(end) = chunk[..got].iter().position(|&p| p == 0) {
            return Some(n + end);
        }
        n += got;
    }
}

/// Copies up to `len` bytes from `addr` to `to`; how many were copied (at least one pointer's
/// worth), or `None` if none could be.
fn read_into(addr: usize, to: *mut c_void, len: usize) -> Option<usize> {
    let n = vm_read(addr, to, len);
    (n >= 8).then_some(n)
}

/// Copies up to `len` bytes from `addr` in this process to `to` with `process_vm_readv`
/// (an unreadable address fails instead of faulting); how many were copied.
fn vm_read(addr: usize, to: *mut c_void, len: usize) -> usize {
    let local = libc::iovec {
        iov_base: to,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: len,
    };
    // SAFETY: `to` has room for `len` bytes (the caller's buffer); the kernel checks `remote`
    // and may stop early at an unreadable page.
    let n = unsafe { libc::process_vm_readv(getpid(), &local, 1, &remote, 1, 0) };
    n.max(0) as usize
}

/// The environment a new image gets: the variable, then the caller's entries; see the
/// module doc.
pub struct CarriedEnv {
    map: *mut c_void,
    len: usize,
}

/// Room for `UIPC_TIMER_NEXT_ID=` with two decimal numbers, a colon and a NUL.
const TIMER_ROOM: usize = 64;
/// Room for the variable of [`crate::procwrite::carried_var`] and its NUL.
pub const WRITES_ROOM: usize = 1024;
/// Room for `UIPC_EXEC_DETACH=` with a decimal pid and a NUL.
const DETACH_ROOM: usize = 64;
/// The three variables, ahead of the pointer table.
const VAR_ROOM: usize = TIMER_ROOM + WRITES_ROOM + DETACH_ROOM;

impl CarriedEnv {
    /// `envp` (NULL: empty, as Linux takes it) with `NAME=pid:next` in front when `counter`
    /// is given, then `writes` (`NAME=value` without its NUL; empty: none), then
    /// `UIPC_EXEC_DETACH=pid` when `detach` is given, and the library's own variables it
    /// lacks ([`kept_missing`]); `None` if `envp` cannot be read, no memory can be mapped,
    /// `writes` does not fit, or there is nothing to add.
    pub fn new(
        envp: usize,
        counter: Option<(i32, u32)>,
        writes: &[u8],
        detach: Option<i32>,
    ) -> Option<CarriedEnv> {
        if writes.len() >= WRITES_ROOM {
            return None;
        }
        let entries = if envp == 0 { 0 } else { count_entries(envp)? };
        let missing = kept_missing(envp, entries)?;
        let added = missing.len()
            + usize::from(counter.is_some())
            + usize::from(!writes.is_empty())
            + usize::from(detach.is_some());
        if added == 0 {
            return None;
        }
        let len = VAR_ROOM + (entries + added + 1) * 8;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let carried = CarriedEnv { map, len };
        // SAFETY: the mapping is ours, `len` bytes, zero-filled and writable.
        let bytes = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), len) };
        let (var, table) = bytes.split_at_mut(VAR_ROOM);
        let mut at = 0;
        if let Some((pid, next)) = counter {
            write_var(var, pid, next);
            table[..8].copy_from_slice(&(map as usize).to_ne_bytes());
            at = 8;
        }
        if !writes.is_empty() {
            // The NUL is already there (the mapping is zero-filled).
            var[TIMER_ROOM..TIMER_ROOM + writes.len()].copy_from_slice(writes);
            let p = map as usize + TIMER_ROOM;
            table[at..at + 8].copy_from_slice(&p.to_ne_bytes());
            at += 8;
        }
        if let Some(pid) = detach {
            let room = &mut var[TIMER_ROOM + WRITES_ROOM..];
            let mut digits = [0u8; 20];
            let value = decimal(pid as u64, &mut digits);
            room[..DETACH.len()].copy_from_slice(DETACH);
            room[DETACH.len()..DETACH.len() + value.len()].copy_from_slice(value);
            let p = map as usize + TIMER_ROOM + WRITES_ROOM;
            table[at..at + 8].copy_from_slice(&p.to_ne_bytes());
            at += 8;
        }
        for entry in missing {
            table[at..at + 8].copy_from_slice(&(entry.as_ptr() as usize).to_ne_bytes());
            at += 8;
        }
        if entries > 0 {
            let want = entries * 8;
            // The array is read again straight into place (it was readable a moment ago).
            let got = read_into(envp, table[at..].as_mut_ptr().cast(), want)?;
            if got != want {
                return None;
            }
        }
        // The final NULL is already there (the mapping is zero-filled).
        Some(carried)
    }

    /// The `char *const envp[]` to pass to exec.
    pub fn envp(&self) -> *const *const c_char {
        // SAFETY: the pointer table starts VAR_ROOM bytes into the mapping.
        unsafe { self.map.cast::<u8>().add(VAR_ROOM).cast() }
    }
}

impl Drop for CarriedEnv {
    fn drop(&mut self) {
        // errno is kept: this runs after a failed exec.
        let saved = crate::guard::errno_now();
        // SAFETY: our own mapping.
        unsafe { crate::kernel::kernel_munmap(self.map, self.len) };
        crate::guard::set_errno(saved);
    }
}

/// Writes `NAME=pid:next` and a NUL into `out` (zero-filled, VAR_ROOM bytes).
fn write_var(out: &mut [u8], pid: i32, next: u32) {
    let mut at = 0;
    let mut put = |b: &[u8]| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(NAME.to_bytes());
    put(b"=");
    put(decimal(u64::from(pid as u32), &mut [0; 20]));
    put(b":");
    put(decimal(u64::from(next), &mut [0; 20]));
}

/// `v` in decimal, in the tail of `buf`.
pub fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn entries(env: &CarriedEnv) -> Vec<String> {
        let mut out = Vec::new();
        let mut p = env.envp();
        // SAFETY: a NULL-terminated array of NUL-terminated strings built by the test.
        unsafe {
            while !(*p).is_null() {
                out.push(CStr::from_ptr(*p).to_string_lossy().into_owned());
                p = p.add(1);
            }
        }
        out
    }

    #[test]
    fn the_variable_comes_first_and_the_callers_entries_follow_unchanged() {
        let a = c"A=1";
        let b = c"B=two";
        let envp = [a.as_ptr(), b.as_ptr(), std::ptr::null()];
        let env = CarriedEnv::new(
            envp.as_ptr() as usize,
            Some((4321, 4_000_000_000)),
            b"",
            None,
        )
        .unwrap();
        assert_eq!(
            entries(&env),
            ["UIPC_TIMER_NEXT_ID=4321:4000000000", "A=1", "B=two"]
        );
        let empty = CarriedEnv::new(0, Some((7, 0)), b"", None).unwrap();
        assert_eq!(entries(&empty), ["UIPC_TIMER_NEXT_ID=7:0"]);
        let both = CarriedEnv::new(envp.as_ptr() as usize, Some((7, 0)), b"W=1", None).unwrap();
        assert_eq!(
            entries(&both),
            ["UIPC_TIMER_NEXT_ID=7:0", "W=1", "A=1", "B=two"]
        );
        let writes = CarriedEnv::new(0, None, b"W=1.2.3", None).unwrap();
        assert_eq!(entries(&writes), ["W=1.2.3"]);
        assert!(CarriedEnv::new(0, None, &[b'x'; WRITES_ROOM], None).is_none());
        let all = CarriedEnv::new(envp.as_ptr() as usize, Some((7, 0)), b"W=1", Some(4321));
        assert_eq!(
            entries(&all.unwrap()),
            [
                "UIPC_TIMER_NEXT_ID=7:0",
                "W=1",
                "UIPC_EXEC_DETACH=4321",
                "A=1",
                "B=two"
            ]
        );
    }

    #[test]
    fn an_unreadable_or_unterminated_envp_is_refused_not_followed() {
        assert!(CarriedEnv::new(8, Some((1, 1)), b"", None).is_none());
        // A long array (more than one chunk) is counted to its end.
        let long: Vec<*const c_char> = (0..1000)
            .map(|_| c"X=1".as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let env = CarriedEnv::new(long.as_ptr() as usize, Some((1, 5)), b"", None).unwrap();
        assert_eq!(entries(&env).len(), 1001);
        // An array running into unreadable memory without a NULL. The second page stays
        // reserved (PROT_NONE) while the array is read: unmapped, it could be taken by another
        // test thread's mapping, and the array would read on into it.
        let page = 4096;
        // SAFETY: two fresh pages, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: fills the first page with non-NULL pointers and makes the second unreadable.
        unsafe {
            let p = map.cast::<usize>();
            for k in 0..page / 8 {
                *p.add(k) = 1;
            }
            assert_eq!(
                libc::mprotect(map.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                0
            );
        }
        assert!(CarriedEnv::new(map as usize, Some((1, 1)), b"", None).is_none());
        // SAFETY: the two pages, still ours.
        unsafe { crate::kernel::kernel_munmap(map, 2 * page) };
    }

    #[test]
    fn values_parse_as_pid_and_counter() {
        assert_eq!(parse(b"12:4000000000"), Some((12, 4_000_000_000)));
        assert_eq!(parse(b"12"), None);
        assert_eq!(parse(b"x:1"), None);
        assert_eq!(parse(b"1:-1"), None);
        let mut buf = [0; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
