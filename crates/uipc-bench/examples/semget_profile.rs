//! Profiling aid: the ipc-keys create and lookup loops on the engine alone.
use uipc::ipc::IpcNamespace;
use uipc::Cred;

fn main() {
    let n: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(31900);
    let ns = IpcNamespace::new();
    let root = Cred::root(1);
    for round in 0..2 {
        let t0 = std::time::Instant::now();
        for i in 0..n {
            ns.semget(&root, 0x1000_0000 + i, 1, 0o1600).unwrap();
        }
        println!(
            "{} {n}: {:?}",
            if round == 0 { "create" } else { "lookup" },
            t0.elapsed()
        );
    }
}
