//! `libuipc_preload.so`: loaded with `LD_PRELOAD` (as `uipc run` does), it routes a program's
//! SysV IPC calls to the uipc daemon named by `$UIPC_SOCKET`, so unmodified programs and the
//! processes they fork share uipc's semaphores, message queues and shared memory. Without
//! `$UIPC_SOCKET` every export is the C library's call and nothing else.
//!
//! What it exports, by module:
//! - SysV IPC (`sem.rs`, `msg.rs`, `shm.rs`, `attach.rs`), fork (inherited attachments are
//!   reported before either process runs on), remap_file_pages and mremap on an attachment
//!   (`remap.rs`), munmap of a whole attachment (`unmap.rs`: a detach), unshare and setns (`ipcns.rs`: a new IPC namespace gets new connections).
//! - File locks under `$UIPC_LOCKS=1` (`uipc run --locks`, `locks/`): fcntl's lock commands,
//!   flock, lockf, and the close family (close, dup2, dup3, fclose, close_range, closefrom),
//!   which tells the daemon before a descriptor that may hold locks closes.
//! - POSIX timers under `$UIPC_TIMERS=1` (`uipc run --timers`): timer_create and friends served
//!   in the process by the engine's timer table (`timer.rs`, `timer_service.rs`); the signal
//!   mask, signal wait and sigaction exports (`timer_mask.rs`, `timer_handlers.rs`) keep
//!   overruns as Linux fixes them; the exec functions (`exec.rs`) carry the id counter and the
//!   library's variables to the new image.
//! - `syscall()` (`syscall.rs`): the numbers above reach the same code; every other number, and
//!   the library's own calls to the kernel (`kernel.rs`), go to the C library's `syscall`.
//! - `/proc` views (`procview.rs`, `procwrite.rs`): `/proc/sysvipc/*`, the IPC sysctls and,
//!   under `--locks`, `/proc/locks` show the daemon's objects, limits and locks, and
//!   `/proc/PID/fdinfo/FD` (`fdinfo.rs`) the `lock:` lines of uipc's locks.
//!
//! Every export behaves as the system call: errno set only on failure, the caller's pointers
//! copied with `process_vm_readv` (`user.rs`, so a bad one is EFAULT; bytes in the main
//! thread's stack are read directly), no panic across the C
//! ABI (EINVAL instead); a sleeping semop, semtimedop, msgsnd or msgrcv ends with EINTR when a
//! handler runs (never restarted, as on Linux), and `pthread_cancel` acts in it as in the
//! system call. A daemon that cannot be reached gives ECONNREFUSED,
//! said once per process on stderr. The ids sent come from raw system calls, never through
//! other preloads' wrappers (fakeroot's). The SysV IPC exports, timer_settime, timer_gettime,
//! timer_getoverrun, close and fcntl's non-blocking lock commands are async-signal-safe, as
//! their system calls are: per-thread connections in slots a nested handler does not share
//! (`conn.rs`, `slots.rs`), buffers that are mappings, C structures on the stack (`abi.rs`), no
//! first-call setup (the constructor does it); `tests/c/handler_ipc.c`, `ipc_no_malloc.c`,
//! `timer_handler.c`, `timer_no_malloc.c`, `locks_handler.c` and `locks_no_malloc.c` check it.
//! ARCHITECTURE.md ("The daemon and the preload library") has the design.
//!
//! ## Not supported
//! What the library leaves out or does differently from Linux (the engine's own list is in
//! the `uipc` crate doc).
//! - A read-only shmat hands the process the segment's memfd; a process holding
//!   CAP_DAC_OVERRIDE, CAP_FOWNER or CAP_CHOWN (or running as the daemon's user) can reopen it
//!   writable through `/proc/self/fd`, where Linux's SHM_RDONLY attach gives no descriptor and
//!   only CAP_IPC_OWNER overrides a segment's mode (README, Security).
//! - The semaphore fast path (`semfast.rs`, under `uipc run` only) serves single-sop
//!   semop/semtimedop and GETVAL, GETPID, GETNCNT and GETZCNT on sets of at most 64
//!   semaphores with no sleeper and no SEM_UNDO entry on the daemon, and sleeps there (on a
//!   futex in the arena) a single-sop semop without SEM_UNDO that must wait when no other
//!   process waits on the set; a sleep there ends with EINTR after a signal handler, but not
//!   after a stop signal and SIGCONT with no handler (Linux's semop returns EINTR then too), and
//!   it is not a pthread cancellation point (a deferred pthread_cancel takes effect at the
//!   thread's next cancellation point after the semop returns); a SEM_UNDO operation only
//!   for the one process whose adjustments the set holds (the first to make one since the set
//!   was published), and every call on a set whose adjustments another process holds, take
//!   the daemon path; so do multi-sop operations, GETALL and everything else (a set whose
//!   adjustments were taken to the daemon stays there until their process exits). A fast semop reads its `struct sembuf`
//!   (and timeout) directly when it lies in the main thread's stack or the executable's own
//!   readable mappings (its constants and static data), and otherwise copies it
//!   with `process_vm_readv` so that a bad pointer gives EFAULT; it reads `geteuid` when the
//!   mode does not grant the access to everyone.
//! - The message queue fast path (`msgfast.rs`, under `uipc run` only) serves msgsnd with room
//!   and msgrcv of the queue's first message (any msgtyp mode, E2BIG, ENOMSG and EAGAIN with
//!   IPC_NOWAIT included) on a queue no daemon call sleeps on, whose index's slot (index
//!   modulo 256) is free and whose messages fit its 64 KiB ring. A msgrcv that must wait
//!   sleeps there (a futex in the slot) when no other receiver is asleep on the fast path of
//!   that queue, and a fast msgsnd hands it a matching message of at most 8192 bytes directly
//!   (pipelined, as Linux). That sleep ends with EINTR after a signal handler and goes on after
//!   a stop and SIGCONT, as on Linux; a deferred pthread_cancel takes effect within 200 ms
//!   (the sleeper looks for it between futex waits), and a message handed to the thread in
//!   that moment is lost with it; after
//!   `kernel/msgmax` was raised above 8192, a longer message for a receiver the daemon took
//!   over from the fast path is queued and the receiver looks again (not pipelined: another
//!   receiver may take it first). A sender that must wait, a second receiver that must wait,
//!   a typed receive of a later message, MSG_COPY and every caller the mode grants only
//!   through groups or a capability take the daemon path, and a queue with a daemon-path
//!   sleeper stays there until a later call finds it quiet. A killed holder's slot stays with
//!   the daemon until its exit is applied. On the daemon path, msgsnd and msgrcv that wait
//!   return EINTR after a stop signal and SIGCONT with no handler (Linux goes on waiting).
//! - IPC namespaces: the daemon drops a namespace (and its objects) when the last process it
//!   has seen calling there exits. unshare and setns call the daemon at once (`ipcns.rs`),
//!   but a child made by `clone(CLONE_NEWIPC)` counts only from its first call: if it forks
//!   first and only the forked process calls and exits, the objects go with it (Linux keeps
//!   them while the clone child lives). Nor does anything but a process keep a namespace: one
//!   held only by a bind mount of `/proc/PID/ns/ipc` (`unshare --ipc=FILE`) or an open
//!   descriptor of it is empty when `nsenter --ipc=FILE` enters it again. The daemon reads
//!   the namespace of a process's main thread, so the namespace is per process: an unshare
//!   or setns made by another thread leaves the process where it was, and one made by the
//!   main thread moves every thread (Linux moves the calling thread only).
//! - User namespaces: the ids in IPC_STAT, IPC_SET and the `/proc/sysvipc` views are the
//!   daemon's numbers (its user namespace's), where Linux maps them into the caller's user
//!   namespace (65534 for an unmapped one; an unmapped id in IPC_SET is EINVAL). Permission
//!   checks use the daemon's numbers on both sides, as Linux's use kernel ids.
//! - Descriptors: a thread's connection to the daemon and a memfd received for shmat or the
//!   fast paths' arena are descriptors of the process, where Linux's calls take none. A
//!   process at its soft RLIMIT_NOFILE gets them above it (`fdroom.rs` raises the soft limit
//!   for the moment, up to the hard limit); at its hard limit (without CAP_SYS_RESOURCE) such
//!   a call fails with EMFILE (a thread's first call, a forked child's, shmat). A connection
//!   is moved to the top quarter of the soft RLIMIT_NOFILE (from 768 under the usual limit
//!   of 1024, from at most 1024: `fdroom.rs`), so the program's own opens get the numbers
//!   Linux gives them; where no number there is free it stays low, and is never 0, 1 or 2
//!   (`conn.rs` moves it up). `/proc/self/fd` lists it, and a program's F_DUPFD into that
//!   range finds the number taken (a dup2 over it replaces it: the library connects again).
//! - A program run where the library's path or the daemon's socket cannot be reached (a
//!   chroot, a mount namespace that hides them) runs without uipc: the loader says it cannot
//!   preload the library, and the program's calls reach the kernel.
//! - A program that unmaps or read-protects part of its own main stack, or of its executable's
//!   mappings, and then passes a pointer into that part to a SysV IPC or timer call crashes
//!   where Linux gives EFAULT (`user.rs` reads the main stack and the executable's readable
//!   mappings directly). sem_otime can show the current second after a fast
//!   call that raced the daemon's takeover of its set without completing (ARCHITECTURE.md).
//!   Processes in a nested pid namespace use the daemon path for every call.
//! - File locks: closes the library does not see drop nothing at once: raw system call
//!   instructions, closes inside libc other than
//!   fclose's (freopen, `posix_spawn` file actions), and descriptors closed by a process that
//!   never calls the library. POSIX locks then stay until the process exits; OFD and flock
//!   locks until the daemon's next close, exit or exec sweep, or a call that conflicts with
//!   them, finds the description unreferenced (and until then the daemon's copy of the
//!   description keeps it open: a deleted file's blocks stay in use). Close-on-exec: the library's exec functions
//!   report the process's close-on-exec descriptors of locked files first (`locks/exec.rs`),
//!   so a successful exec drops their POSIX locks as Linux does; an exec by a raw system
//!   call instruction does not, nor does one racing another thread that changes
//!   `FD_CLOEXEC` or opens a descriptor meanwhile.
//! - File locks: a close of a regular file or directory costs an fstat and a read of the
//!   daemon's lock hints, and a round trip if the file was ever asked to be locked (hint
//!   bytes are never cleared and may collide) unless the process holds the file's lease. The
//!   lock calls themselves cost one round trip carrying the descriptor (SCM_RIGHTS), except
//!   F_SETLK, F_SETLKW and F_GETLK of a process holding the file's lease (`locks/lease.rs`):
//!   a process alone locking a regular file, with at most 14 ranges there, after its first
//!   call on the file (a file taken back for another process is leased again only 32 calls
//!   later), and whole-file write locks, unlocks and F_GETLK of any process on a contended
//!   file in shared mode (`locks/shared.rs`). OFD locks always take the daemon path (their description may be shared with
//!   processes the library cannot see), and so do F_OFD_* commands. flock through a
//!   member of its file's flock lease completes in the caller's process, a blocked LOCK_EX
//!   sleeping on a futex there (`locks/flockfast.rs`; a `kcmp` per call proves the
//!   description); a description becomes a member by one daemon call while the file is
//!   leased. LOCK_SH of two or more descriptions, and a file whose contended flock calls are
//!   parked in the daemon (as when many processes start on it at once), stay on the daemon
//!   path (`uipc bench lockperf`'s daemon table). A leased
//!   F_SETLKW is not a cancellation point when it does not wait, and an F_SETLKW asleep in
//!   shared mode is not one either (glibc's fcntl is one).
//! - File locks in shared mode (ARCHITECTURE.md "Shared mode"): deadlock detection runs in
//!   the library and the daemon without Linux's global lock, so two calls closing one cycle at
//!   the same moment may both get EDEADLK, and a sleeper not woken by a release (an unlock
//!   wakes one) is not checked again against the next owner (a cycle then needs that owner to
//!   have a thread already waiting). A process whose pid the daemon numbers otherwise (a
//!   nested pid namespace) can be sent back and forth between the daemon's queue and shared
//!   mode, and so wait longer.
//! - File locks: a flock or OFD call that conflicts has the daemon check the file's
//!   descriptions for ones nobody holds any more. A description seen held before costs one
//!   `kcmp` per conflict; one whose holders are gone costs a read of every process's
//!   descriptors in `/proc` (milliseconds), as does the last close of a description that
//!   owns locks. Every lock call through the daemon is a round trip, and a contended blocking
//!   one parks there (`uipc bench lockperf`'s daemon table).
//! - File locks: under `--locks` the library's constructor maps the lock hints, a round trip
//!   to the daemon at the start of every program image (so that no close does it, from a
//!   signal handler or a vforked child); that call is also the image's first, which tells
//!   the daemon of the exec (see execve below). Loaded with `dlopen`, the library maps them
//!   at the first close of a regular file or directory instead (a daemon call, which
//!   allocates).
//! - File locks: `struct flock` is read as x86-64 lays it out (32 bytes); F_GETLK/F_SETLK on
//!   32-bit ABIs (the non-64 `struct flock`) are not handled. A restarted F_SETLKW (handler
//!   with SA_RESTART) keeps its place in the daemon's queue; Linux re-queues it at the end.
//! - `syscall()` takes its variadic arguments as seven `long`s, right on x86-64 and aarch64
//!   only (`syscall.rs`). Raw system call instructions (not through `syscall()`) reach the
//!   kernel, as do the 32-bit `ipc(2)` multiplexer and the time64 variants of other ABIs.
//! - POSIX timers (`--timers`), where uipc differs from Linux:
//!   - The kernel does not say when a signal is taken: the service looks at its pending sets
//!     (by signal number) at growing gaps after sending and around each period boundary.
//!     A periodic timer whose taken signal is seen late (the service thread delayed by load,
//!     periods of a few hundred µs) counts the boundaries in between as overrun, which
//!     getoverrun reports but no signal carries: such timers deliver fewer signals than Linux,
//!     by far so for periods of a few hundred µs.
//!   - `si_overrun`: exact for a signal accepted with sigwaitinfo or sigtimedwait, or taken
//!     by a handler installed with SA_SIGINFO through the library's sigaction (the exports dequeue it
//!     from the engine then and write the count: `timer_mask.rs`, `timer_handlers.rs`),
//!     SIGEV_THREAD_ID included. Not corrected: signalfd reads, and handlers installed by a
//!     raw rt_sigaction. A still-pending process signal is also taken back and queued again
//!     with the overrun at each boundary, which moves it behind other queued signals of its
//!     number.
//!   - Unblocking: sigprocmask and pthread_sigmask (the library's exports) fire the timers due
//!     and wait up to 1 s for their signals to be queued before setting a mask that may
//!     unblock, so a signal blocked at its expiry is pending at the unblock as on Linux and
//!     getoverrun then counts what it absorbed; an unblock by sigsuspend, pselect, ppoll or a
//!     raw rt_sigprocmask does not wait.
//!   - Another pending signal of the same number (another timer's, a `sigqueue`) makes a
//!     taken timer signal look pending: that timer counts overruns instead of firing until
//!     the other signal is taken.
//!   - settime and delete take a still-pending process signal of the timer out of the kernel
//!     (Linux leaves it visible to `sigpending()` and drops it at dequeue); a pending
//!     SIGEV_THREAD_ID signal of a deleted or re-set timer is delivered.
//!   - Ignored signals: a timer whose signal would be dropped as ignored (SIG_IGN, or SIG_DFL
//!     for SIGCHLD, SIGCONT, SIGURG or SIGWINCH, and not blocked by its target thread, the
//!     leader for a process signal) is parked at its expiry, not re-armed, as Linux parks it.
//!     The service reads the action and the blocked set just before it would send, so a
//!     change racing the expiry counts as made before or after it. A new action replacing
//!     SIG_IGN wakes the parked timers through the library's sigaction, signal(),
//!     bsd_signal(), sysv_signal() and sigset() only: not through a raw rt_sigaction. A thread waiting for a
//!     default-ignored signal in a raw rt_sigtimedwait (not the library's sigwaitinfo or
//!     sigtimedwait) counts as not blocking it.
//!   - exec: the id counter, which Linux keeps across execve, reaches the new image only
//!     through the library's exec functions (`exec.rs`), in its environment: an exec by a raw
//!     system call instruction, or a new image without the library, starts at 0. The
//!     variable (`UIPC_TIMER_NEXT_ID`) is removed from `environ` at load, but
//!     `/proc/PID/environ` shows it, and an image started without the library keeps it. A
//!     timer another thread creates while exec builds the environment is not counted. (The
//!     signals the service queued, being SI_TIMER, are dropped by the kernel at execve, as
//!     Linux drops its own.) timer_create in a vforked child fails with EAGAIN (Linux gives
//!     the child a timer of its own; a service made there would live in its parent's memory).
//!   - RLIMIT_SIGPENDING counts this process's timers only (Linux: every process of the real
//!     uid, and queued signals); while pending, the signals the service queues count as the
//!     kernel's ordinary queued signals (Linux preallocates them), and one refused at the
//!     kernel's limit is lost.
//!   - CPU-time clocks are polled every 10 ms (Linux: at the tick); alarm clocks are
//!     EOPNOTSUPP (a machine without an RTC wake alarm) even where the host has one.
//!   - SIGEV_THREAD uses only the stack size of `sigev_notify_attributes`, and its `timer_t`
//!     is the plain id (glibc's encodes a pointer). A NULL sigevent is glibc's: SIGALRM with
//!     value 0 (through `syscall()`, the kernel's: `sival_int` = id).
//!   - `prctl(PR_TIMER_CREATE_RESTORE_IDS)` is not routed (it reaches the kernel); the
//!     kernel's `/proc/PID/timers` lists none of uipc's timers. Time namespaces are ignored.
//!   - Async-signal safety: timer_settime, timer_gettime and timer_getoverrun are safe in a
//!     handler (see the overview above) with these limits: a CPU-time clock's timer
//!     (its list in the engine grows on settime); a timer deleted by another thread during
//!     the call (the call may drop the last reference and free it); another thread's
//!     timer_create or timer_delete, which allocate while holding an engine lock (a table
//!     stripe) the call may wait for, so a handler that interrupted malloc can in principle
//!     wait for it through the allocator's lock; many timers deleted while armed with far
//!     expiries (their heap entries stay until they expire, uncounted by the reservation, so
//!     an arm may grow the heap). timer_create and timer_delete are not async-signal-safe
//!     (nor in POSIX). Each export holds the program's handlers off while it runs, with no
//!     system call (`sigmask.rs`): a signal arriving then is queued again to the same thread
//!     and delivered when the call returns, to that thread (a process signal another thread
//!     could have taken at once waits for this one; a sigwaitinfo in another thread does not
//!     see it). A handler installed by a raw rt_sigaction runs unheld, and may deadlock if it
//!     calls these exports. signal() always installs with SA_RESTART (glibc's leaves it out
//!     for a signal named to siginterrupt). settime and delete keep up to 16 siginfos (2 KiB)
//!     on the stack while taking a pending signal back.
//! - vfork and posix_spawn children (`vfork.rs`; tests/c/vfork_spawn.c compares with the
//!   host): as on Linux they are processes of their own (pid, SEM_UNDO, POSIX lock owner,
//!   exit) that share the parent's attachments (nattch unchanged); a vforked child's calls
//!   use connections of their own. Where uipc differs: shmat and shmdt in a vforked child
//!   (undefined in POSIX; Linux maps into or unmaps from the shared memory, the parent's
//!   afterwards) are refused with ENOMEM and EINVAL. A fork by raw syscall, or inside libc
//!   (daemon(3) calls its internal fork), is not announced: the child's inherited
//!   attachments are mapped but not counted (a raw-forked child gets sessions of its own at
//!   its first call).
//! - Shared memory is counted per attachment, not per mapping: Linux's shm_nattch counts the
//!   segment's memory areas, so a remap_file_pages, mprotect or munmap that splits an
//!   attachment raises it there, not here. munmap detaches an attachment only when it unmaps
//!   exactly that one whole attachment (its start, its length rounded up to pages); a munmap
//!   of part of an attachment, or of a range holding more than one or starting before one,
//!   is the kernel's alone and leaves the daemon's shm_nattch counting the attachment
//!   (Linux counts the pieces left, or drops it when none is), as does a munmap in a vforked
//!   child or by the program's own system call instruction. mremap of part of an attachment, or with MREMAP_DONTUNMAP, leaves the
//!   library's record where the attachment was (shmdt at its start unmaps its whole original
//!   range). `/proc/PID/maps` names the segments' memfds, not `/SYSV<key> (deleted)`.
//! - The library keeps the caller's pid instead of asking the kernel on every call (the
//!   atfork handler renews it), until the process first calls vfork, the C library's clone or
//!   `_Fork`, or `syscall()` with a fork or clone number (`vfork.rs`). A child made by a fork
//!   or clone system call that the program issues with its own instructions is not seen: it
//!   would talk on its parent's sessions with its parent's pid. Likewise a slot checks that
//!   its descriptor is still its socket only after a close, dup2, dup3, fclose, close_range,
//!   closefrom or `syscall()` of those numbers (`slots.rs`): a descriptor of the library's
//!   closed or replaced by the program's own system call instruction is not noticed. The
//!   same count keeps what the lock paths remember of the program's descriptors (a flock
//!   lease member's proof, a descriptor's file and access mode: `locks/flockfast.rs`,
//!   `locks/lease.rs`): a descriptor closed by the program's own system call instruction (or
//!   an io_uring close) and opened again at the same number on another file may have its
//!   next lock call served as the old file's while it holds a lease, where Linux locks the
//!   new file.
//! - Effective ids: each thread keeps the euid and egid its frames carry and reads them again
//!   only after an id change the library sees (the set*id functions, `syscall()` with their
//!   numbers, unshare, setns) or a frame the kernel refused for them (`ids.rs`). A process
//!   that changes its effective ids with its own system call instruction, keeping the old ones
//!   as real or saved ids, is judged by the old ones until its next change the library sees
//!   (the kernel still checks that it holds them: it gains nothing it could not send itself).
//!   Capabilities are the daemon's reading of the thread group leader's, so a thread that
//!   changes only its own ids (`syscall(SYS_setresuid, ...)`) keeps the leader's capabilities.
//! - exec: a new environment that lacks the library's variables gets them back, but one that
//!   sets `LD_PRELOAD` (or a `UIPC_*` variable) to another value keeps it, and an exec by a
//!   raw system call instruction is not seen. An image the loader does not preload into (a
//!   static binary, a setuid or file-capability binary run by another user: AT_SECURE) runs
//!   without the library, its SysV IPC calls reaching the kernel; the library says so in one
//!   line on stderr before the first such exec of a process (`exec_check.rs`: no
//!   `PT_INTERP`, or ids that differ after the exec; file capabilities are not read).
//! - execve is seen when the new image makes its first call (its `Hello` says it is new), which
//!   its constructor makes when the process held attachments (`UIPC_EXEC_DETACH`, set by the
//!   library's exec functions) or under `--locks`: the attachments are detached just after
//!   the exec (Linux: during it, so a process that sees a close-on-exec descriptor close may
//!   still see them counted for a moment). An image started without the library, or by an
//!   exec the library does not see (a raw system call), keeps them counted until it exits.
//! - Async-signal safety of the SysV IPC exports (see the overview above) holds with
//!   these limits: the library must be loaded at start (`LD_PRELOAD`): loaded with `dlopen`,
//!   its thread-locals are glibc's dynamic TLS, allocated at a thread's first use; if the
//!   program had made 32 or more pthread keys before the constructor ran, glibc allocates at
//!   the first call of each thread (`pthread_setspecific`). A handler that leaves a library
//!   call with `longjmp` leaves that call's connection marked busy: the thread uses its other
//!   one, and a one-off connection (connect and hello per call, much slower) for calls
//!   nested deeper than one handler. shmat, shmdt and a fork with attachments block all
//!   signals while they hold the attachment table (shmat and shmdt over a round trip to the
//!   daemon), so a signal then is delivered up to a round trip late, and a handler's shmat or
//!   shmdt waits for another thread's. Each thread that calls from a handler keeps a second
//!   connection (a second session in the daemon). A handler on a small alternate signal
//!   stack needs about 1 KiB more than for the system call: `tests/c/handler_altstack.c
//!   SIZE` (semop, semctl, msgsnd, msgrcv, shmat and shmdt from a handler on a `sigaltstack`
//!   of SIZE bytes) runs with 5120 and overflows with 4096 under uipc; on the host kernel
//!   4096 is enough and 3072 not (x86-64; `SIGSTKSZ`, the test's default, is 8192).
//! - A handler that interrupts a sleeping semop, semtimedop, msgsnd or msgrcv runs before the
//!   library learns of the signal and cancels the wait: if the handler's own call satisfies
//!   the sleeping one (posts the semaphore it waits for, sends the message), the sleeping call
//!   completes instead of failing with EINTR, as it would on Linux (where the wait ends
//!   before the handler runs).
//! - File locks from signal handlers: under `--locks`, close and fcntl's F_GETLK, F_SETLK and
//!   F_OFD_GETLK/F_OFD_SETLK (F_UNLCK included) are async-signal-safe as the SysV IPC exports
//!   are (the same per-thread connections and slots, `struct flock` in a stack buffer, the
//!   lock hints mapped by the constructor; a handler's close that interrupted another close's
//!   report on its thread is reported too). `tests/c/locks_handler.c` and
//!   `tests/c/locks_no_malloc.c` check this. Not covered (not
//!   checked for allocation): the blocking F_SETLKW/F_OFD_SETLKW and flock, lockf, dup2, dup3,
//!   close_range, closefrom (the `/proc/self/fd` walk is on the stack, but untested from a
//!   handler) and fclose (the C library's fclose is not async-signal-safe anyway). Without
//!   `--locks` the close family goes straight to the C library's.
//! - Not async-signal-safe: timer_create and timer_delete under `--timers` (they allocate;
//!   the other three timer exports are safe, with the limits under "POSIX timers" above), nor
//!   the exec functions under `--timers` (they build the new image's environment).
//! - `/proc` views: recognised by absolute path only (`/proc/sysvipc/sem`, `.`, `..` and
//!   repeated slashes resolved as text): a relative path (`sysvipc/sem` from `/proc`), a path
//!   through a symbolic link or `/proc/self/..`, an `openat` relative to a directory
//!   descriptor, a raw system call or `syscall(SYS_openat, ...)`, and a `stat` of the file
//!   (size 0 either way) reach the kernel's files. A view's text is taken at open (Linux
//!   renders at each read from position 0), and its descriptor's fstat shows the text's size
//!   and no link (Linux: size 0); a sysctl read in several reads gives all of its text
//!   (Linux gives only what the read at position 0 took) and lseek with SEEK_END works
//!   (Linux: EINVAL for the `/proc/sysvipc` files). A sysctl opened O_WRONLY is a read-write
//!   memfd: F_GETFL says O_RDWR and a read gives end of file (Linux: EBADF). Under `--locks`, `/proc/locks` shows uipc's
//!   locks, then the kernel's renumbered after them (both read at open). `/proc/PID/fdinfo/FD`
//!   lists every POSIX lock of PID on FD's file (Linux: only those set through FD's open file
//!   description, which matters only to a process that opened the file more than once), in
//!   the daemon's pid numbering (a reader in a nested pid namespace naming another process
//!   by its own number gets no POSIX lines), and another process's FD only when the reader
//!   may `pidfd_getfd` it (ptrace access; otherwise no uipc lines). The open and write
//!   paths of views allocate (not async-signal-safe, unlike open(2) and write(2)).
//! - Sysctl writes: a write the library does not see (stdio's, inside the C library, as in
//!   bash's `echo > file`) goes to the memfd and is applied when a descriptor of it is
//!   closed or the process calls `exit`, so its errno is lost (Linux: the write fails; bash
//!   prints "write error"); through an O_RDWR descriptor such writes are lost, and a process
//!   that ends by `_exit` or a signal leaves them to the next close or exit of another holder.
//!   A descriptor kept across execve stays a sysctl only through the library's exec
//!   functions (`UIPC_PROC_WRITES` in the environment, removed at load); a new image without
//!   the library, or an exec by a raw system call, writes to a plain memfd. Once a process has opened a sysctl for
//!   writing, each of its `write` calls costs an fstat (the lookup of its table of such
//!   descriptors, 16 entries, oldest replaced).
//! - Exits: the daemon applies a process's exit (its SEM_UNDO adjustments, the detach of its
//!   attachments, the end of its sleeping calls) when its pidfd says so, which is before its
//!   parent can reap it (a parent that reaped it sees them done) but after the kernel closed
//!   its descriptors; Linux applies them earlier in the exit, before the descriptors close.
//!   A process that learns of the exit another way (end of file on a pipe or socket the
//!   dead process held) may for a moment still see its adjustments in the semaphore values
//!   and its attachments in shm_nattch.
//! - IPC namespaces (`ipcns.rs`): the daemon serves the namespace of the kernel IPC
//!   namespace `/proc/PID/ns/ipc` names when a connection starts, that is the thread group
//!   leader's: a thread other than the leader that unshares or setns keeps being served in
//!   the leader's (Linux: per thread). unshare and setns reached by a raw system call or
//!   `syscall()` are not seen, so the process keeps its old connections (and namespace) until
//!   it forks. A namespace is dropped when the last process that called uipc from it exits,
//!   even if the kernel namespace lives on in processes that never called (a later caller
//!   from it finds it empty). At unshare/setns Linux also orphans the segments the process
//!   created (`exit_shm`, relevant with shm_rmid_forced); uipc does not. shmdt of an
//!   attachment made in the namespace the process left fails with EINVAL (Linux unmaps it).
//!   A daemon not allowed to read a client's `/proc/PID/ns/ipc` (another user's process under
//!   an unprivileged `--shared` daemon) serves its own namespace to it.
//! - PID namespaces: the daemon gives a caller in a nested pid namespace the pids of
//!   semctl GETPID, msgctl/shmctl's `*_STAT` and F_GETLK as that namespace numbers them (0
//!   for a process it cannot see), reading `/proc/PID/status` NSpid lines (the server's
//!   `pidns.rs`). A process that has exited can no longer be looked up and shows as 0 there
//!   (Linux still gives its number). `/proc/sysvipc/{msg,shm}` read through the views number
//!   them alike, as the reader's pid namespace does; Linux numbers them as the pid namespace
//!   of the /proc mount read, the same when the namespace mounted its own (`unshare -pf
//!   --mount-proc`, container runtimes) but not for a reader of its parent's /proc.
//!   `/proc/locks` shows the daemon's numbers.
//! - semctl's variadic argument is read as x86-64 and aarch64 pass it; other ABIs are not
//!   handled. The structure layouts are x86-64's.
//! - A shmat at a given address checks only the daemon's record and the kernel's
//!   MAP_FIXED_NOREPLACE; if mapping fails after the daemon recorded the attachment, the
//!   library detaches it again, which sets the segment's dtime.
//! - Messages longer than 8 MiB (msgmax raised past it) cannot be sent (EFAULT).
//! - SHM_REMAP over part of an attachment: Linux splits the old mapping and counts each piece
//!   in nattch (it counts mappings); uipc drops the whole old attachment from its books while
//!   the kernel keeps its remaining pages mapped (the differential run leaves SHM_REMAP out
//!   for this reason).
//! - A MAP_FIXED mapping (mmap) over an attachment is not seen: Linux would count the
//!   attachment gone (nattch), uipc keeps it until shmdt, exec or exit.
//! - A fork while another thread is between the daemon's shmat reply and its mapping can give
//!   the child a recorded attachment it does not have (nattch one too high until it exits).
//! - The attachment table is one mutex, taken by shmat, shmdt and fork (shmat and shmdt hold
//!   it over their round trip to the daemon): threads of a process attach and detach one at
//!   a time.

mod abi;
mod attach;
mod conn;
mod ctl;
mod exec;
mod exec_check;
mod exec_env;
mod fdinfo;
mod fdroom;
mod fork;
mod futex;
mod guard;
mod ids;
mod ipcns;
mod kernel;
mod keyfast;
mod locks;
mod mapbuf;
mod msg;
mod msgfast;
mod open_fds;
mod proctext;
mod procview;
mod procwrite;
mod remap;
mod sem;
mod semfast;
mod shm;
mod sigmask;
mod slots;
mod syscall;
mod timer;
mod timer_abi;
mod timer_delivery;
mod timer_handlers;
mod timer_in_flight;
mod timer_mask;
mod timer_service;
mod timer_signals;
mod timer_thread;
mod unmap;
mod user;
mod vfork;

/// The library's constructor: everything that may allocate or take a lock happens here, once,
/// rather than in a first call that might come from a signal handler.
extern "C" fn init() {
    // SAFETY: registers a child handler that only bumps an atomic counter.
    unsafe { libc::pthread_atfork(None, None, Some(slots::after_fork_in_child)) };
    conn::prepare();
    user::prepare();
    semfast::prepare();
    kernel::prepare();
    vfork::prepare();
    ids::prepare();
    fork::prepare();
    locks::prepare();
    exec::prepare();
    timer::prepare();
    timer_mask::prepare();
    timer_handlers::prepare();
    procview::prepare();
    procwrite::prepare();
    ipcns::prepare();
}

/// Runs [`init`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
