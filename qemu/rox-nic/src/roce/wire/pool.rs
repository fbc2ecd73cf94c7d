//! Packet buffers reused: the port hands the buffers of the frames it sent back
//! ([`recycle`]), and the next packet this thread builds is written over one of them. Their
//! bytes are initialized already, so a data packet's payload is gathered from guest memory
//! straight over the old bytes: no allocation and no zeroing pass per packet (at 4 KiB
//! frames, zeroing was a fifth of a cable WRITE's instructions).
//!
//! One pool per thread: a device's data path builds, sends and recycles its packets on its
//! own thread, so it meets only its own buffers and never waits for a lock.

use std::cell::RefCell;

/// Buffers kept per thread: a burst's worth of 4 KiB frames (about 1 MiB).
const POOL_BUFFERS: usize = 256;
/// Nor are buffers of more than a cable slot (a frame of a port with a very large MTU): the
/// pool stays within POOL_BUFFERS x 16 KiB per thread.
const POOL_MAX_CAPACITY: usize = 16 << 10;

thread_local! {
    static SPENT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Gives back the buffer of a packet that was sent (or dropped) for a later packet. Short
/// ones too: allocating, zeroing and freeing each request's buffer cost about 450 of the
/// host benchmark's 7,400 instructions per 8 B WRITE.
pub fn recycle(buf: Vec<u8>) {
    if buf.capacity() > POOL_MAX_CAPACITY {
        return;
    }
    SPENT.with_borrow_mut(|pool| {
        if pool.len() < POOL_BUFFERS {
            pool.push(buf);
        }
    });
}

/// A buffer of `len` initialized bytes (their values are whatever was there: the builder
/// writes every one of them).
pub(super) fn buffer(len: usize) -> Vec<u8> {
    if let Some(mut buf) = SPENT.with_borrow_mut(Vec::pop) {
        // Shrinking writes nothing; growing zeroes only the new bytes (a short packet's
        // buffer grows once, then carries long ones).
        buf.resize(len, 0);
        return buf;
    }
    vec![0; len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_comes_back_with_the_length_asked_and_huge_ones_are_not_kept() {
        // The test thread's own pool: nothing else runs on it.
        while SPENT.with_borrow_mut(Vec::pop).is_some() {}
        let big = vec![7u8; 4096];
        let at = big.as_ptr();
        recycle(big);
        let again = buffer(2000);
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 2000),
            "the same allocation"
        );
        recycle(vec![1u8; POOL_MAX_CAPACITY + 1]);
        let fresh = buffer(3000);
        assert_eq!(
            fresh,
            vec![0u8; 3000],
            "a fresh buffer when the pool is empty"
        );
        recycle(again);
        let grown = buffer(4096);
        assert!(grown[2000..].iter().all(|&b| b == 0), "growth is zeroed");
        let short = vec![3u8; 60];
        let at = short.as_ptr();
        recycle(short);
        let reused = buffer(40);
        assert_eq!(reused.as_ptr(), at, "a short packet's buffer is kept too");
        for _ in 0..POOL_BUFFERS + 10 {
            recycle(vec![0u8; 60]);
        }
        assert_eq!(
            SPENT.with_borrow(Vec::len),
            POOL_BUFFERS,
            "the pool is bounded"
        );
    }
}
