// SPDX-License-Identifier: GPL-2.0
//! The driver's side of every admin query's response buffer (the rule in uapi's `admin`
//! module doc): the command carries the buffer's length, the device writes a prefix of its
//! response and answers how many bytes. The driver takes those bytes and zero for the rest of
//! its response, so a device with a shorter response (fewer counters) reads as zero there and a
//! device with a longer one never writes past the buffer; but it refuses an answer shorter than
//! the fields it reads (`AdminQuery::REQUIRED_LEN`), which zero would stand in for unseen.
//! Pure logic: `admin.rs` runs the queries; the host and KUnit test this.

/// Why a device's answer of how much it wrote is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadLength {
    /// Fewer bytes than the fields the driver reads.
    Short,
    /// More bytes than the buffer holds (a device that broke the rule: nothing it wrote is
    /// trusted).
    Over,
}

/// The bytes of a `buffer`-byte response that a device answering `written` wrote, when that
/// is at least the `required` bytes the driver reads and at most the buffer.
pub(crate) fn written_prefix(
    written: u32,
    required: usize,
    buffer: usize,
) -> Result<usize, BadLength> {
    match usize::try_from(written) {
        Ok(n) if n > buffer => Err(BadLength::Over),
        Ok(n) if n < required => Err(BadLength::Short),
        Ok(n) => Ok(n),
        Err(_) => Err(BadLength::Over),
    }
}

/// Keeps the first `written` bytes of `response` and zeroes the rest (a device writes nothing
/// there; the zeroes do not depend on that).
pub(crate) fn keep_prefix(response: &mut [u8], written: usize) {
    if let Some(rest) = response.get_mut(written..) {
        rest.fill(0);
    }
}
