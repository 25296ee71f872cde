//! Giving freed memory back to the system once chats leave memory.
//!
//! A dropped session frees its messages, but glibc's allocator keeps freed pages in its arenas
//! (one per thread that allocated), so after a burst of large chats the process stays as large
//! as at the peak although nothing uses that memory. When chats have left memory the server asks
//! the allocator to return its free pages (`malloc_trim`), so the memory of chats that went idle
//! or whose sockets closed goes back. Elsewhere (another allocator or platform) this does nothing.

/// Returns the allocator's free pages to the system.
pub(crate) fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` only walks glibc's own arenas under their locks and releases
        // free pages; it touches no memory the program uses and is safe from any thread.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
