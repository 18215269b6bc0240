//! The words of memory the daemon shares with its clients: the semaphore arena and the key
//! table after it ([`super::sem::fast::SemArena`], [`super::keytable::KeyTable`]). They are
//! atomics in the process's own memory (tests, loom models, an engine with no clients) or in
//! a mapping that an embedder keeps alive with the words. [`Slots`] cuts an area of them into
//! equal slots, as the fast paths' views of their areas do.

use crate::sync::AtomicU64;

/// Owned atomics, or `len` atomics at `words` kept mapped by `_keep`.
pub(crate) enum SharedWords {
    Owned(Box<[AtomicU64]>),
    #[cfg(not(loom))]
    Mapped {
        words: *const AtomicU64,
        len: usize,
        _keep: Box<dyn std::any::Any + Send + Sync>,
    },
}

// SAFETY: the mapped words are atomics valid while `_keep` lives (`mapped`'s contract);
// atomics are shared between threads by design.
unsafe impl Send for SharedWords {}
// SAFETY: as above.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// `len` zeroed atomics in the process's own memory.
    pub(crate) fn owned(len: usize) -> SharedWords {
        SharedWords::Owned((0..len).map(|_| AtomicU64::new(0)).collect())
    }

    /// `len` words at `ptr`, kept mapped as long as `keep` lives.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned, valid for reads and writes of `len` words for as long as
    /// `keep` lives, and used by others only as atomics.
    #[cfg(not(loom))]
    pub(crate) unsafe fn mapped(
        ptr: *mut u8,
        len: usize,
        keep: Box<dyn std::any::Any + Send + Sync>,
    ) -> SharedWords {
        SharedWords::Mapped {
            words: ptr.cast(),
            len,
            _keep: keep,
        }
    }

    /// The words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        match self {
            SharedWords::Owned(w) => w,
            // SAFETY: `mapped`'s contract: `len` atomics, alive while `self` is.
            #[cfg(not(loom))]
            SharedWords::Mapped { words, len, .. } => unsafe {
                std::slice::from_raw_parts(*words, *len)
            },
        }
    }

    /// What the embedder kept with a mapping (`mapped`'s `keep`).
    pub(crate) fn keeper(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        match self {
            SharedWords::Owned(_) => None,
            #[cfg(not(loom))]
            SharedWords::Mapped { _keep, .. } => Some(&**_keep),
        }
    }
}

/// An area of shared words cut into slots of `W` words each: slot `k` is words
/// `k * W..(k + 1) * W`.
#[derive(Clone, Copy)]
pub(crate) struct Slots<'a, const W: usize> {
    words: &'a [AtomicU64],
}

impl<'a, const W: usize> Slots<'a, W> {
    /// The slots of `words` (a slot past their end is `None`).
    pub(crate) fn new(words: &'a [AtomicU64]) -> Slots<'a, W> {
        Slots { words }
    }

    /// Slot `k`'s words, `None` if the area ends before it does.
    pub(crate) fn get(self, k: usize) -> Option<&'a [AtomicU64]> {
        self.words
            .get(k.checked_mul(W)?..k.checked_add(1)?.checked_mul(W)?)
    }
}

/// Maps `len` bytes of the memfd `fd` shared, readable and writable, as atomic words; `None`
/// if the kernel refuses. The mapping lives until unmapped.
#[cfg(not(loom))]
pub(crate) fn map_words(
    fd: std::os::fd::RawFd,
    len: usize,
) -> Option<std::ptr::NonNull<AtomicU64>> {
    // SAFETY: a new shared mapping of a descriptor the caller holds; no MAP_FIXED, so no
    // memory in use changes.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    std::ptr::NonNull::new(p.cast())
}
