//! The state every worker, the event loop and the exit thread share: the namespaces and lock
//! tables served, the client processes, the event loop, the job queue and the stop gate.
//! Built by [`crate::Server::bind`]; the modules below it take the parts they need (a job
//! queue, the lock tables) rather than the whole, so that only the layers above (sessions,
//! workers, the server) name it.

use crate::descriptions::{Descriptions, Scope};
use crate::exits::ExitWatch;
use crate::hints::LockHints;
use crate::jobs::Jobs;
use crate::lockserve;
use crate::memfd::MemfdBacking;
use crate::namespaces::Namespaces;
use crate::procs::Procs;
use crate::reactor::Reactor;
use crate::stop::StopGate;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uipc::ipc::IpcNamespace;
use uipc::locks::LockManager;

/// The state every session shares.
pub struct Shared {
    /// The namespaces served, one per kernel IPC namespace of the clients.
    pub namespaces: Namespaces,
    /// The file locks served.
    pub locks: LockManager,
    /// The open file descriptions that may own OFD or flock locks.
    pub descriptions: Descriptions,
    /// Which files may have locks, for clients to skip telling of closes that drop nothing.
    pub hints: Option<LockHints>,
    pub(crate) backing: Arc<MemfdBacking>,
    pub(crate) procs: Procs,
    /// Which frames must look for exits first (`exits.rs`).
    pub(crate) exits: ExitWatch,
    /// The event loop's state: connections, deadlines.
    pub reactor: Reactor,
    pub(crate) jobs: Arc<Jobs>,
    pub(crate) parked: AtomicUsize,
    pub(crate) stop: StopGate,
}

impl Shared {
    /// The namespace the daemon started with (its own kernel IPC namespace's).
    pub fn ns(&self) -> &IpcNamespace {
        self.namespaces.home()
    }

    /// Stops serving for good and returns once the namespace is still ([`crate::stop`]): what a save
    /// needs.
    pub fn stop_serving(&self) {
        self.stop.close(|| self.jobs.pending());
    }

    /// Calls parked now (waiting without a thread).
    pub fn parked_calls(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }

    /// A client process is gone: its SysV IPC exit rules, its POSIX locks, and the OFD and
    /// flock locks of descriptions nobody holds open any more.
    pub fn process_exit(&self, pid: i32) {
        self.namespaces.process_exit(pid);
        let tgid = uipc::Tgid::new(pid);
        self.locks.process_exit(tgid);
        self.descriptions.exec.forget(&self.locks, tgid);
        lockserve::sweep(&self.locks, &self.descriptions, Scope::All, &|| {});
    }
}
