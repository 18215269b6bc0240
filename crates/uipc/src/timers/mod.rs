//! POSIX per-process timers (issue: the timer engine). Not built yet.
