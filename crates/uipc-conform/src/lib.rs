//! Differential conformance runs: random operations applied to the host kernel and to the
//! engine, results compared.
//!
//! Each subsystem module draws operations from a seeded generator ([`rng::Rng`]), applies each to
//! the host (real system calls) and to the engine, and records a [`Divergence`] whenever return
//! values, errnos or the resulting state differ. A run ends with the line
//! `N operations, M divergences`.

pub mod ipc;
pub mod locks;
pub mod rng;
pub mod timers;

/// Options shared by every conformance run.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many operations to draw.
    pub ops: u64,
    /// The generator's seed: the same seed draws the same operations.
    pub seed: u64,
    /// Print every operation, not just divergences.
    pub verbose: bool,
    /// `ipc` only: also write every comparison's host result to this file
    /// ([`ipc::trace`]), for comparing a native run with one under `uipc run`.
    pub trace: Option<std::path::PathBuf>,
}

/// One operation whose result differed between the host and the engine.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// The operation's number in the run (0-based).
    pub index: u64,
    /// The operation, as a readable call.
    pub op: String,
    /// What the host kernel returned or showed.
    pub host: String,
    /// What the engine returned or showed.
    pub engine: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "divergence at op {}: {}\n  host:   {}\n  engine: {}",
            self.index, self.op, self.host, self.engine
        )
    }
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    /// Operations applied to both sides.
    pub operations: u64,
    /// Every divergence found, in order.
    pub divergences: Vec<Divergence>,
}

impl Report {
    /// The closing line every run prints.
    pub fn summary(&self) -> String {
        format!(
            "{} operations, {} divergences",
            self.operations,
            self.divergences.len()
        )
    }
}
