//! One module per `uipc bench` scenario.

pub mod ipc_idcycle;
pub mod ipc_keys;
pub mod peers;

use uipc::ipc::IpcNamespace;
use uipc::Cred;

/// One no-op semop on the engine: wait-for-zero on semaphore 0, which is zero.
pub(crate) fn engine_noop_semop(ns: &IpcNamespace, cred: &Cred, id: i32) {
    let _ = (ns, cred, id);
    unimplemented!("wired to IpcNamespace::semop once semaphores land")
}
