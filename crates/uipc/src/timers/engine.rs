//! What one timer engine shares between its calls, its driver thread and its CPU-clock poller
//! ([`Inner`]), and what it needs from its embedder to notify ([`Notifier`]). The calls
//! (`create.rs`, `ops.rs`, `procfs.rs`) take the [`Inner`]; [`super::Timers`] owns it.

use super::cpu::{CpuClocks, CpuTimers};
use super::driver::Driver;
use super::process::{Registry, SigpendingCounts};
use super::table::TimerTable;
use super::timer::{Timer, TimerSignal};
use crate::clock::Clock;

/// What the embedder provides to deliver timer notifications.
pub trait Notifier: Send + Sync + 'static {
    /// Queues `signal` for its target (SIGEV_SIGNAL, SIGEV_THREAD_ID, SIGEV_THREAD). Called with
    /// no engine lock held. The signal must later be passed to [`super::Timers::dequeue_signal`], when
    /// delivered or discarded, or the timer will not queue another one.
    fn queue(&self, signal: TimerSignal);

    /// Whether thread `tid` belongs to process `tgid` (SIGEV_THREAD_ID targets). The default
    /// knows only the main thread.
    fn same_thread_group(&self, tgid: i32, tid: i32) -> bool {
        tgid == tid
    }
}

/// A notifier that drops every signal: for engines used only with SIGEV_NONE timers.
#[derive(Debug, Default)]
pub struct NoNotifier;

impl Notifier for NoNotifier {
    fn queue(&self, _signal: TimerSignal) {}
}

// std's Arc here: embedders pass `Arc<dyn Clock>` etc., a coercion loom's Arc does not support,
// and the engine is shared with a std thread (the driver), which loom does not model.
pub(crate) struct Inner {
    pub(crate) clock: std::sync::Arc<dyn Clock>,
    pub(crate) notifier: std::sync::Arc<dyn Notifier>,
    pub(crate) table: TimerTable<Timer>,
    pub(crate) procs: Registry,
    pub(crate) sigpending: SigpendingCounts,
    pub(crate) driver: Driver,
    pub(crate) id_mask: u32,
    pub(crate) alarm_rtc: bool,
    pub(crate) cpu: Option<std::sync::Arc<dyn CpuClocks>>,
    pub(crate) cpu_timers: CpuTimers,
    /// Creation counter: `/proc/PID/timers` lists newest first.
    pub(crate) created: crate::sync::AtomicU64,
}
