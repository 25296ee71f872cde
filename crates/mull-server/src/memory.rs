//! Giving freed memory back to the system once chats leave memory.
//!
//! A dropped session frees its messages, but glibc's allocator keeps freed pages in its arenas
//! (one per thread that allocated), so after a burst of large chats the process stays as large
//! as at the peak although nothing uses that memory. When chats have left memory the server asks
//! the allocator to return its free pages (`malloc_trim`), so the memory of chats that went idle
//! or whose sockets closed goes back. Elsewhere (another allocator or platform) this does nothing.

/// Free memory the allocator held is worth a log line from this size on.
const WORTH_TELLING: usize = 1 << 20;

/// Returns the allocator's free pages to the system, and says how much it held free beside
/// what is in use when that was worth it.
pub(crate) fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` reads glibc's own counters; `malloc_trim` only walks glibc's
        // arenas under their locks and releases free pages. Neither touches memory the program
        // uses, and both are safe from any thread.
        let held = unsafe { libc::mallinfo2() };
        unsafe {
            libc::malloc_trim(0);
        }
        if held.fordblks >= WORTH_TELLING {
            tracing::info!(
                free_mib = held.fordblks >> 20,
                in_use_mib = held.uordblks >> 20,
                "freed memory the allocator held given back to the system"
            );
        }
    }
}
