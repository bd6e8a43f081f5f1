//! Freed heap memory given back to the kernel. glibc's allocator keeps what
//! a burst freed (400 slow readers leave about 60 MiB of freed pieces and
//! connection buffers behind in its arenas) until `malloc_trim` returns the
//! free pages; [`trim_every`] calls it on a blocking thread at a fixed
//! period, so anonymous memory falls back after a burst without a restart.
//! Nothing is freed that is in use: `malloc_trim` only releases pages of
//! free chunks. Other allocators: nothing to do.

use std::time::Duration;

/// How often freed heap memory is given back.
pub const TRIM_PERIOD: Duration = Duration::from_secs(5);

/// Give freed heap memory back to the kernel every `period`, forever (the
/// caller aborts the task). Each call runs on a blocking thread: it walks
/// the allocator's arenas under their locks.
pub async fn trim_every(period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

/// Release the free pages of every arena (glibc), once.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes a pad size and touches only the
    // allocator's own free chunks, under its own locks; it has no
    // precondition a caller could break. It is `unsafe` only as a foreign
    // function.
    unsafe {
        libc::malloc_trim(0);
    }
}
