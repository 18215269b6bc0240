//! Placeholder: filled in by the msg work.

use super::namespace::{HasRegistry, IpcNamespace};
use super::registry::{IpcHeader, IpcObject, Registry};
use crate::table::IdLayout;

/// One object.
pub struct MsgQueue {
    header: IpcHeader,
}

impl IpcObject for MsgQueue {
    fn header(&self) -> &IpcHeader {
        &self.header
    }
}

/// The namespace's table of these objects.
pub struct MsgIds {
    registry: Registry<MsgQueue>,
}

impl MsgIds {
    pub(crate) fn new(layout: IdLayout) -> MsgIds {
        MsgIds {
            registry: Registry::new(layout),
        }
    }
}

impl HasRegistry<MsgQueue> for MsgIds {
    fn registry(&self) -> &Registry<MsgQueue> {
        &self.registry
    }
}

impl IpcNamespace {}

impl IpcNamespace {
    /// `/proc/sysvipc/msg`. Not built yet.
    pub fn proc_sysvipc_msg(&self) -> String {
        String::new()
    }
}
