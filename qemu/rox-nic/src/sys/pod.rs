//! Plain-old-data: the uapi structures the device reads from and writes to guest memory and the
//! admin queue, viewed as bytes.

/// Plain-old-data: every bit pattern is a valid value and the type has no padding that matters.
///
/// # Safety
/// Implement only for `#[repr(C)]` types (and unions) made of integers, arrays of integers and
/// uapi's `ids` newtypes (`#[repr(transparent)]` u32s of which every bit pattern is a value).
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: only listed for integers and uapi's `#[repr(C)]` structs and unions of
            // integers, integer arrays and `ids` newtypes (checked by their layout asserts), as
            // `Pod` requires.
            unsafe impl Pod for $t {}
        )*
    };
}
pod!(u8, u16, u32, u64);
// SAFETY: an array of Pod values is Pod: its elements are, and an array has no padding between
// them.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}
pod!(
    rox_uapi::queue::Sge,
    rox_uapi::queue::SqWqe,
    rox_uapi::queue::SqSeg,
    rox_uapi::queue::RdmaSeg,
    rox_uapi::queue::UdSeg,
    rox_uapi::queue::BindSeg,
    rox_uapi::queue::FastRegSeg,
    rox_uapi::queue::RqWqe,
    rox_uapi::queue::Cqe,
    rox_uapi::queue::Eqe,
    rox_uapi::queue::PageList,
    rox_uapi::wake::WakeCompanion,
    rox_uapi::admin::AdminCmd,
    rox_uapi::admin::AdminCpl,
    rox_uapi::admin::QpAttr,
    rox_uapi::admin::DeviceAttr,
    rox_uapi::admin::PortAttr,
    rox_uapi::admin::PortCounters,
    rox_uapi::admin::QueryCmd,
    rox_uapi::admin::HandleCmd,
    rox_uapi::admin::KeyCmd,
    rox_uapi::admin::QpnCmd,
    rox_uapi::admin::SetGidCmd,
    rox_uapi::admin::McastCmd,
    rox_uapi::admin::RegMrCmd,
    rox_uapi::admin::CreateCqCmd,
    rox_uapi::admin::AllocMwCmd,
    rox_uapi::admin::ResizeCqCmd,
    rox_uapi::admin::CreateQpCmd,
    rox_uapi::admin::ModifyQpCmd,
    rox_uapi::admin::CreateSrqCmd,
    rox_uapi::admin::ModifySrqCmd,
    rox_uapi::admin::SetPortStateCmd,
    rox_uapi::admin::OdpUpdateCmd,
    rox_uapi::admin::NoPayload,
);

/// View a Pod value as bytes.
pub fn as_bytes<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: T is Pod, so all of its bytes are initialised plain data.
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, size_of::<T>()) }
}

/// View a Pod value as bytes to fill in (any bytes written make a valid value).
pub fn as_bytes_mut<T: Pod>(value: &mut T) -> &mut [u8] {
    // SAFETY: T is Pod: every byte pattern written through the slice is a valid value; the
    // slice covers exactly `value`, borrowed mutably for the slice's lifetime.
    unsafe { std::slice::from_raw_parts_mut(value as *mut T as *mut u8, size_of::<T>()) }
}

/// Build a Pod value from bytes (zero-extended if short).
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> T {
    // SAFETY: T is Pod: the all-zero pattern is a valid value.
    let mut value: T = unsafe { std::mem::zeroed() };
    let n = bytes.len().min(size_of::<T>());
    as_bytes_mut(&mut value)[..n].copy_from_slice(&bytes[..n]);
    value
}

/// The `U` a Pod union (or struct) holds at its start: e.g. one variant of a WQE's segment.
pub fn read_as<U: Pod, T: Pod>(value: &T) -> U {
    from_bytes(as_bytes(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_short_input_zero_extends() {
        let v = 0x0102_0304_0506_0708u64;
        assert_eq!(from_bytes::<u64>(as_bytes(&v)), v);
        assert_eq!(from_bytes::<u64>(&[0xaa]), 0xaa);
        assert_eq!(read_as::<u32, u64>(&v), 0x0506_0708);
    }

    /// uapi's segment and WQE builders, which rox.ko, librox and the testkit use, write the
    /// bytes of the field-by-field literals rox.ko wrote before it used them (session 20).
    #[test]
    fn the_segment_builders_write_the_bytes_of_their_field_by_field_segments() {
        use rox_uapi::ids::Key;
        use rox_uapi::queue::{RdmaSeg, SqSeg, SqWqe, SQ_WQE_DATA_SIZE};
        let (addr, rkey) = (0x1122_3344_5566_7788u64, Key::from_raw(0x8000_0123));
        let literal = |rdma: RdmaSeg| SqSeg { rdma };
        let remote = RdmaSeg {
            remote_addr: addr,
            rkey,
            ..Default::default()
        };
        assert_eq!(
            as_bytes(&SqSeg::remote(addr, rkey)),
            as_bytes(&literal(remote))
        );
        let atomic = RdmaSeg {
            remote_addr: addr,
            rkey,
            compare_add: 0x0102_0304_0506_0708,
            swap: 0xa1a2_a3a4_a5a6_a7a8,
            ..Default::default()
        };
        assert_eq!(
            as_bytes(&SqSeg::atomic(addr, rkey, atomic.compare_add, atomic.swap)),
            as_bytes(&literal(atomic))
        );
        let invalidate = RdmaSeg {
            rkey,
            ..Default::default()
        };
        assert_eq!(
            as_bytes(&SqSeg::invalidate(rkey)),
            as_bytes(&literal(invalidate))
        );
        // The device reads the rkey to invalidate where the builder put it.
        assert_eq!(read_as::<RdmaSeg, _>(&SqSeg::invalidate(rkey)).rkey, rkey);
        assert!(as_bytes(&SqSeg::default()).iter().all(|&b| b == 0));

        let mut built = SqWqe::new(7, 3, 0x5);
        built.imm_data = 0x0a0b_0c0d;
        built.inline_len = 12;
        built.seg = SqSeg::remote(addr, rkey);
        let literal_wqe = SqWqe {
            wr_id: 7,
            opcode: 3,
            flags: 0x5,
            num_sge: 0,
            reserved0: 0,
            imm_data: 0x0a0b_0c0d,
            inline_len: 12,
            xrc_srqn: 0,
            seg: literal(remote),
            data: [0; SQ_WQE_DATA_SIZE],
        };
        assert_eq!(as_bytes(&built), as_bytes(&literal_wqe));
    }
}
