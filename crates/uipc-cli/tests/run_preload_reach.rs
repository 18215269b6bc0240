//! `uipc run` started by a process that may switch uid warns when the preload library is out
//! of reach of other users (a child that switches uid would run without uipc), and says
//! nothing when every user may reach it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(tag: &str, mode: u32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uipc-run-reach-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// The stderr of `uipc run -- true` with `lib` as the preload library.
fn stderr_with(lib: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_uipc"))
        .args(["run", "--", "true"])
        .env("UIPC_PRELOAD", lib)
        .env_remove("UIPC_SOCKET")
        .env_remove("UIPC_NO_REACH_WARNING")
        .output()
        .unwrap();
    assert!(out.status.success(), "uipc run failed: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn library_in(dir: &Path, mode: u32) -> PathBuf {
    // Any file will do: the dynamic linker reports a library it cannot load and runs on.
    let lib = dir.join(format!("libuipc_preload-{mode:o}.so"));
    std::fs::write(&lib, b"").unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(mode)).unwrap();
    lib
}

#[test]
fn warns_only_when_others_cannot_reach_the_library() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (the warning is for processes that may switch uid)");
        return;
    }
    let closed = scratch("closed", 0o700);
    let open = scratch("open", 0o755);
    let cases = [
        (library_in(&closed, 0o644), true),
        (library_in(&open, 0o600), true),
        (library_in(&open, 0o644), false),
    ];
    for (lib, warned) in &cases {
        let err = stderr_with(lib);
        assert_eq!(
            err.contains("uipc: warning:") && err.contains("runs without uipc"),
            *warned,
            "{}: {err}",
            lib.display()
        );
        std::fs::remove_file(lib).unwrap();
    }
    let _ = std::fs::remove_dir_all(&closed);
    let _ = std::fs::remove_dir_all(&open);
}
