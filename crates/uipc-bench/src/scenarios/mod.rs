//! One module per `uipc bench` scenario.

pub mod ipc_idcycle;
pub mod ipc_keys;
