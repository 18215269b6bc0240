//! How util-linux's ipcs writes a value: user and group names, times as `ctime(3)` writes
//! them, octal as C's `%#o`, and sizes in bytes, kbytes or "human" units (one letter, one
//! decimal rounded half up, as util-linux's `size_to_human_string`); and which of its outputs
//! was asked for ([`Format`]).

use std::ffi::{c_char, CStr};

/// Which output (`-c`, `-t`, `-p`, `-l`, `-u`; the default listing otherwise).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// The default columns.
    Default,
    /// `-c`.
    Creator,
    /// `-t`.
    Time,
    /// `-p`.
    Pid,
    /// `-l`.
    Limits,
    /// `-u`.
    Status,
}

/// The unit sizes are shown in (`-b`, `--human`, or the default of each line).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    /// What each line shows when nothing is asked.
    Default,
    /// `-b`.
    Bytes,
    /// Kilobytes (the default of some limits).
    Kb,
    /// `--human`.
    Human,
}

/// The name a password or group database entry holds (`None` for a null entry).
fn entry_name<T>(entry: *const T, name: impl FnOnce(&T) -> *const c_char) -> Option<String> {
    // SAFETY: `entry` is null or the C library's static storage for the last lookup, which
    // nothing overwrites meanwhile: the command is single-threaded.
    let entry = unsafe { entry.as_ref() }?;
    // SAFETY: an entry's name is NUL-terminated.
    Some(
        unsafe { CStr::from_ptr(name(entry)) }
            .to_string_lossy()
            .into(),
    )
}

/// A user's name, if the password database has one.
pub fn user(uid: u32) -> Option<String> {
    // SAFETY: getpwuid takes any uid and returns static storage or null.
    entry_name(unsafe { libc::getpwuid(uid) }, |pw| pw.pw_name)
}

/// A group's name, if the group database has one.
pub fn group(gid: u32) -> Option<String> {
    // SAFETY: getgrgid takes any gid and returns static storage or null.
    entry_name(unsafe { libc::getgrgid(gid) }, |gr| gr.gr_name)
}

/// The owner column: the name cut to 10 characters and padded to 10, or the uid.
pub fn owner(uid: u32) -> String {
    match user(uid) {
        Some(name) => format!("{:<10}", name.chars().take(10).collect::<String>()),
        None => format!("{uid:<10}"),
    }
}

/// `ctime(3)` of `t` without its newline (24 characters), in local time.
pub fn ctime(t: i64) -> String {
    let mut buf = [0 as libc::c_char; 32];
    let t = t as libc::time_t;
    // SAFETY: ctime_r writes at most 26 bytes into the 32-byte buffer and NUL-terminates.
    let p = unsafe { libc::ctime_r(&t, buf.as_mut_ptr()) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ctime_r succeeded: the buffer holds a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    s.trim_end_matches('\n').to_string()
}

/// `%-W.Ps` of ctime(t) from character `skip`, or of "Not set" when t is 0.
pub fn time_col(t: i64, skip: usize, precision: usize, width: usize) -> String {
    let s = if t == 0 {
        "Not set".to_string()
    } else {
        ctime(t).chars().skip(skip).take(precision).collect()
    };
    format!("{s:<width$}")
}

/// C's `%#o`.
pub fn alt_octal(v: u32) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("0{v:o}")
    }
}

fn exponent(n: u64) -> u32 {
    let mut shift = 10;
    while shift <= 60 && n >= 1u64 << shift {
        shift += 10;
    }
    shift - 10
}

/// util-linux's one-letter human size: `15B`, `4.9K`, `16E`.
pub fn human(bytes: u64) -> String {
    let exp = exponent(bytes);
    let letter = b"BKMGTPE"[(exp / 10) as usize] as char;
    let (mut whole, mut frac) = if exp == 0 {
        (bytes, 0)
    } else {
        (bytes >> exp, bytes & ((1u64 << exp) - 1))
    };
    if frac != 0 {
        frac = if frac >= u64::MAX / 1000 {
            ((frac / 1024) * 1000) / (1u64 << (exp - 10))
        } else {
            (frac * 1000) / (1u64 << exp)
        };
        frac = (frac + 50) / 100 * 10;
        if frac == 100 {
            whole += 1;
            frac = 0;
        }
    }
    if frac == 0 {
        return format!("{whole}{letter}");
    }
    let mut digits = format!("{frac:02}");
    if digits.ends_with('0') {
        digits.pop();
    }
    format!("{whole}.{digits}{letter}")
}

/// util-linux's `ipc_print_size`: `label` (a name gets its unit and " = "; one ending in
/// '=' is written as it is), the size in `unit` at `width` (negative: left-aligned), then
/// `end`.
pub fn size(unit: Unit, label: Option<&str>, bytes: u64, end: &str, width: i32) -> String {
    let mut s = String::new();
    match label {
        None => {}
        Some(l) if l.ends_with('=') => s += l,
        Some(l) if unit == Unit::Bytes => s += &format!("{l} (bytes) = "),
        Some(l) if unit == Unit::Kb => s += &format!("{l} (kbytes) = "),
        Some(l) => s += &format!("{l} = "),
    }
    let value = match unit {
        Unit::Default | Unit::Bytes => bytes.to_string(),
        Unit::Kb => (bytes / 1024).to_string(),
        Unit::Human => human(bytes),
    };
    let w = width.unsigned_abs() as usize;
    s += &if width < 0 {
        format!("{value:<w$}")
    } else {
        format!("{value:>w$}")
    };
    s + end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_round_as_util_linux() {
        let cases = [
            (0, "0B"),
            (15, "15B"),
            (5000, "4.9K"),
            (2047, "2K"),
            (16384, "16K"),
            (u64::MAX - (1 << 24), "16E"),
        ];
        for (bytes, shown) in cases {
            assert_eq!(human(bytes), shown, "{bytes} bytes");
        }
        assert_eq!(alt_octal(0o1640), "01640");
        assert_eq!(alt_octal(0), "0");
    }
}
