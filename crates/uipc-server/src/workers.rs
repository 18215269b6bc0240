//! The worker threads: a fixed pool, each serving jobs forever ([`work`]). A worker takes its
//! next job from the queue or finds it by leading the event loop ([`crate::jobs`], which has
//! the leader/follower rules), then runs it inside the stop gate ([`crate::stop`]), then the
//! jobs that job made, before it takes the next.

use crate::conn::Job;
use crate::shared::Shared;
use std::sync::Arc;

/// How many workers serve: the cores, at least 4 (a lock call's `/proc` sweep or a reply to
/// a slow reader holds a worker for a while) and at most 16.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().clamp(4, 16))
}

/// Serves jobs forever on the calling thread.
pub fn work(shared: &Arc<Shared>) -> ! {
    loop {
        shared
            .jobs
            .serve_next(&shared.reactor, &shared.exits, |job| run(shared, job));
    }
}

/// Runs a worker's job inside the stop gate; a new frame is dropped once the daemon is
/// stopping.
fn run(shared: &Arc<Shared>, job: Job) {
    let _inside = match job {
        Job::Frame(..) => match shared.stop.enter_new() {
            Some(inside) => inside,
            None => return,
        },
        _ => shared.stop.enter(),
    };
    crate::session::run_job(shared, job);
}

/// Starts `count` workers serving `shared`'s jobs.
pub fn spawn(shared: &Arc<Shared>, count: usize) -> std::io::Result<()> {
    for i in 0..count {
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("uipc-worker-{i}"))
            .spawn(move || work(&s))?;
    }
    Ok(())
}
