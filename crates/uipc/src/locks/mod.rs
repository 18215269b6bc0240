//! POSIX record locks, OFD locks and flock (issue: the file-lock engine). Not built yet.
