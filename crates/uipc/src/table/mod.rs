//! The scalable tables the seeds are about.
