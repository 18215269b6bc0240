//! Putting the state file in place so that a crash at any moment leaves either the old file
//! or the new one, never a mix, and never writing through a link someone else planted.
//!
//! Saving: a temporary file is created in the state file's own directory (so the rename
//! stays on one file system) with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 (the file holds
//! every user's messages and segments): an existing name, a symbolic link included, is never
//! opened, and another name is tried. It is written, `fsync`ed, renamed over the state file
//! (rename replaces a link itself, never its target) and the directory is `fsync`ed, so the
//! rename is on disk when the daemon says it saved. A failed save removes its temporary file.
//!
//! Restoring: the state file is opened with `O_NOFOLLOW` and must be a regular file. Once
//! restored, it is renamed to `FILE.consumed` (and the directory synced) before the daemon
//! serves, so a crash after that point cannot restore it again; a damaged file is renamed to
//! `FILE.damaged` (`.damaged-1`, ...: never over an earlier one) only when asked to.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How many temporary names a save tries before giving up.
pub const TEMP_ATTEMPTS: u32 = 16;

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = path.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    path.with_file_name(name)
}

/// The `n`th temporary name a save of `path` by process `pid` tries.
pub fn temp_name(path: &Path, pid: u32, n: u32) -> PathBuf {
    with_suffix(path, &format!(".tmp-{pid}-{n}"))
}

fn open(path: &Path, flags: i32, mode: u32) -> io::Result<File> {
    let c = c_path(path)?;
    // SAFETY: a NUL-terminated path and plain flags; the result is checked and owned below.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Creates a fresh temporary file beside `path`: never an existing name, never through a
/// link.
pub fn create_temp(path: &Path) -> io::Result<(File, PathBuf)> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let mut last = None;
    for n in 0..TEMP_ATTEMPTS {
        let tmp = temp_name(path, std::process::id(), n);
        match open(&tmp, flags, 0o600) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", tmp.display()))),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} names for a temporary file beside {} are taken ({}): remove them",
            TEMP_ATTEMPTS,
            path.display(),
            last.map_or_else(String::new, |e| e.to_string())
        ),
    ))
}

/// Syncs the directory holding `path`, so a rename in it is on disk.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    open(dir_of(path), libc::O_RDONLY | libc::O_DIRECTORY, 0)?.sync_all()
}

/// Makes the written temporary file `tmp` the state file `path`, durably.
pub fn commit(file: File, tmp: &Path, path: &Path) -> io::Result<()> {
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, path)?;
    sync_dir(path)
}

/// Opens the state file to restore: `None` if there is none. A symbolic link or anything but
/// a regular file is refused.
pub fn open_state(path: &Path) -> io::Result<Option<File>> {
    match open(path, libc::O_RDONLY | libc::O_NOFOLLOW, 0) {
        Ok(f) if f.metadata()?.is_file() => Ok(Some(f)),
        Ok(_) => Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(io::Error::other(format!(
            "{} is a symbolic link: give the file's own path",
            path.display()
        ))),
        Err(e) => Err(e),
    }
}

/// Renames `path` to `path` + `suffix` (replacing an earlier one), durably.
pub fn set_aside(path: &Path, suffix: &str) -> io::Result<PathBuf> {
    let to = with_suffix(path, suffix);
    std::fs::rename(path, &to)?;
    sync_dir(path)?;
    Ok(to)
}

/// Renames `path` to the first free name of `path` + `suffix`, `-1`, `-2`, ... (never
/// replacing one), durably.
pub fn set_aside_new(path: &Path, suffix: &str) -> io::Result<PathBuf> {
    let from = c_path(path)?;
    for n in 0..1000 {
        let to = match n {
            0 => with_suffix(path, suffix),
            n => with_suffix(path, &format!("{suffix}-{n}")),
        };
        let c_to = c_path(&to)?;
        // SAFETY: two NUL-terminated paths relative to the working directory.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                c_to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r == 0 {
            sync_dir(path)?;
            return Ok(to);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Err(io::Error::other(format!(
        "no free name to move {} aside",
        path.display()
    )))
}
