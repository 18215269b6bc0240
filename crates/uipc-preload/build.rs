//! Compiles the C part of the library: execl, execle and execlp, which are variadic
//! (`csrc/exec_variadic.c`; the exported symbols are naked Rust functions in `src/exec.rs`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/exec_variadic.c");
    cc::Build::new()
        .file("csrc/exec_variadic.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("uipc_exec_variadic");
}
