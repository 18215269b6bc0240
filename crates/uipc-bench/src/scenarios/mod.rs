//! One module per `uipc bench` scenario.

pub mod ipc_idcycle;
pub mod ipc_keys;
pub mod lockperf;
pub mod lockperf_more;
pub mod peers;
pub mod shim;
pub mod timers;

use uipc::ipc::sem::Sembuf;
use uipc::ipc::IpcNamespace;
use uipc::{Cred, WaitCtx};

/// One no-op semop on the engine: wait-for-zero on semaphore 0, which is zero.
pub(crate) fn engine_noop_semop(ns: &IpcNamespace, cred: &Cred, id: i32) {
    let sop = [Sembuf {
        sem_num: 0,
        sem_op: 0,
        sem_flg: 0,
    }];
    ns.semop(cred, id, &sop, &WaitCtx::FOREVER)
        .expect("a no-op semop succeeds");
}
