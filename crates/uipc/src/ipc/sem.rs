//! Placeholder: filled in by the sem work.

use super::namespace::{HasRegistry, IpcNamespace};
use super::registry::{IpcHeader, IpcObject, Registry};
use crate::table::IdLayout;

/// One object.
pub struct SemSet {
    header: IpcHeader,
}

impl IpcObject for SemSet {
    fn header(&self) -> &IpcHeader {
        &self.header
    }
}

/// The namespace's table of these objects.
pub struct SemIds {
    registry: Registry<SemSet>,
}

impl SemIds {
    pub(crate) fn new(layout: IdLayout) -> SemIds {
        SemIds {
            registry: Registry::new(layout),
        }
    }
}

impl HasRegistry<SemSet> for SemIds {
    fn registry(&self) -> &Registry<SemSet> {
        &self.registry
    }
}

impl IpcNamespace {
    pub(crate) fn sem_process_exit(&self, _tgid: i32) {}
}

impl IpcNamespace {
    /// `/proc/sysvipc/sem`. Not built yet.
    pub fn proc_sysvipc_sem(&self) -> String {
        String::new()
    }
}
