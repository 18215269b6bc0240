//! Placeholder: filled in by the shm work.

use super::namespace::{HasRegistry, IpcNamespace};
use super::registry::{IpcHeader, IpcObject, Registry};
use crate::table::IdLayout;

/// One object.
pub struct ShmSegment {
    header: IpcHeader,
}

impl IpcObject for ShmSegment {
    fn header(&self) -> &IpcHeader {
        &self.header
    }
}

/// The namespace's table of these objects.
pub struct ShmIds {
    registry: Registry<ShmSegment>,
}

impl ShmIds {
    pub(crate) fn new(
        layout: IdLayout,
        _backing: Option<std::sync::Arc<dyn ShmBacking>>,
    ) -> ShmIds {
        ShmIds {
            registry: Registry::new(layout),
        }
    }
}

impl HasRegistry<ShmSegment> for ShmIds {
    fn registry(&self) -> &Registry<ShmSegment> {
        &self.registry
    }
}

/// Where segment memory comes from.
pub trait ShmBacking: Send + Sync {}

impl IpcNamespace {
    pub(crate) fn shm_process_exit(&self, _tgid: i32) {}
    pub(crate) fn shm_process_fork(&self, _parent: i32, _child: i32) {}
    pub(crate) fn shm_process_exec(&self, _tgid: i32) {}
    pub(crate) fn shm_destroy_orphans(&self) {}
}

impl IpcNamespace {
    /// `/proc/sysvipc/shm`. Not built yet.
    pub fn proc_sysvipc_shm(&self) -> String {
        String::new()
    }
}
