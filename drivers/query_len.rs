// SPDX-License-Identifier: GPL-2.0
//! The driver's side of every admin query's response buffer (the rule in uapi's `admin`
//! module doc): the command carries the buffer's length, the device writes a prefix of its
//! response and answers how many bytes. The driver takes those bytes and zero for the rest of
//! its response, so a device with a shorter response (fewer counters) reads as zero there and a
//! device with a longer one never writes past the buffer. Pure logic: `admin.rs` runs the
//! queries; the host and KUnit test this.

/// The bytes of a `buffer`-byte response that a device answering `written` wrote: `None` when
/// it claims more than the buffer holds (a device that broke the rule: nothing it wrote is
/// trusted).
pub(crate) fn written_prefix(written: u32, buffer: usize) -> Option<usize> {
    usize::try_from(written).ok().filter(|&n| n <= buffer)
}

/// Keeps the first `written` bytes of `response` and zeroes the rest (a device writes nothing
/// there; the zeroes do not depend on that).
pub(crate) fn keep_prefix(response: &mut [u8], written: usize) {
    if let Some(rest) = response.get_mut(written..) {
        rest.fill(0);
    }
}
