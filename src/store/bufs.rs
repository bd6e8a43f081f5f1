//! The memory a checked read's pieces are read into ([`super::checked`]):
//! a bounded pool of buffers already written once, so a warm read takes
//! its pieces' memory from here rather than from the allocator, and never
//! zeroes it again (the safe `preadv2` reads into initialized memory only).
//! Zeroing each read's fresh buffers, their page faults and the allocator
//! were about 3% of a warm 1 MiB range read's CPU (`docs/performance.md`).
//!
//! Three sizes, the pieces' own (64, 128 and 256 KiB); a piece takes the
//! smallest that holds it, and a larger one (a read's joined last piece,
//! or a store with 1 MiB checksum blocks) gets memory of its own, not
//! kept. At most [`IDLE`] bytes wait here between reads; a buffer given
//! back beyond that is freed. The lock is held to push or pop a buffer,
//! never across a read.

use std::sync::Mutex;

/// The sizes kept, smallest first.
const SIZES: [usize; 3] = [64 << 10, 128 << 10, 256 << 10];

/// Bytes of idle buffers kept per size, at most (16 MiB in all).
const IDLE: [usize; 3] = [2 << 20, 2 << 20, 12 << 20];

static POOL: [Mutex<Vec<Vec<u8>>>; 3] = [
    Mutex::new(Vec::new()),
    Mutex::new(Vec::new()),
    Mutex::new(Vec::new()),
];

/// The size class that holds `n` bytes, if any.
fn class(n: usize) -> Option<usize> {
    SIZES.iter().position(|&s| n <= s)
}

/// Memory for a piece of `n` bytes: a kept buffer (written before: its
/// length is its size, so reading into it zeroes nothing), else a fresh
/// one of the class's size, else (larger than every class) an empty one.
pub(super) fn take(n: usize) -> Vec<u8> {
    let Some(c) = class(n) else {
        return Vec::new();
    };
    let kept = POOL[c].lock().unwrap_or_else(|p| p.into_inner()).pop();
    kept.unwrap_or_else(|| vec![0; SIZES[c]])
}

/// A piece's memory back, once its last handle is dropped: kept when it
/// is one of the sizes (whole, as [`take`] gave it) and the pool has
/// room, else freed.
pub(super) fn give(memory: Vec<u8>) {
    let Some(c) = SIZES.iter().position(|&s| s == memory.len()) else {
        return;
    };
    let mut pool = POOL[c].lock().unwrap_or_else(|p| p.into_inner());
    if (pool.len() + 1) * SIZES[c] <= IDLE[c] {
        pool.push(memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_takes_the_smallest_size_that_holds_it_and_the_pool_stays_bounded() {
        assert_eq!(take(1).len(), 64 << 10);
        assert_eq!(take(64 << 10).len(), 64 << 10);
        assert_eq!(take((64 << 10) + 1).len(), 128 << 10);
        assert_eq!(take(192 << 10).len(), 256 << 10);
        // larger than every size: memory of its own, never kept
        assert!(take(320 << 10).is_empty());
        give(vec![0; 320 << 10]);
        // a buffer given back comes out again, unzeroed: its bytes are the
        // reader's to write over
        let mut b = take(256 << 10);
        b[0] = 7;
        let at = b.as_ptr();
        give(b);
        let again = take(256 << 10);
        assert_eq!(again.len(), 256 << 10);
        if again.as_ptr() == at {
            assert_eq!(again[0], 7);
        }
        give(again);
        // no more than IDLE bytes of a size wait
        for _ in 0..100 {
            give(vec![0; 64 << 10]);
        }
        let held = POOL[0].lock().unwrap().len() * (64 << 10);
        assert!(held <= IDLE[0], "{held}");
    }
}
