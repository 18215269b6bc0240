//! Which machine a run was on: CPU model, core count, kernel release.

use serde::Serialize;

/// The machine description written into every report.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    /// `uname -r`.
    pub kernel_release: String,
}

impl Machine {
    /// Reads this machine's description.
    pub fn detect() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine {
            cpu_model,
            cores,
            kernel_release,
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {} cores, Linux {}",
            self.cpu_model, self.cores, self.kernel_release
        )
    }
}
