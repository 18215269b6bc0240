//! SysV IPC: namespaces, registries, semaphores, message queues, shared memory.
