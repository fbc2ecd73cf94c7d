//! The numbers that name things on the wire and in queue entries, each its own type so that a
//! QP number, a packet sequence number and a memory key cannot be passed for one another, and
//! each rule about them (24-bit range, serial-number order, key index and variant) has one
//! implementation.
//!
//! Every type is a `#[repr(transparent)]` u32, so it sits in `#[repr(C)]` queue entries and
//! command payloads exactly as the integer did. Any bit pattern is representable (a word read
//! from guest memory is a value of the type); `is_valid` says whether a word that came from
//! outside fits the type's range, and the consumer of such a word refuses it when it does not.

/// A queue pair number: 24 bits, the width of BTH DestQP and DETH SrcQP (IBA 9.2, 9.3.2).
#[repr(transparent)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qpn(u32);

impl Qpn {
    /// The bits a QPN can use.
    pub const MASK: u32 = 0x00ff_ffff;
    /// QP0, the subnet management QP (not on RoCE).
    pub const SMI: Qpn = Qpn(0);
    /// QP1, the general services QP (CM MADs).
    pub const GSI: Qpn = Qpn(1);
    /// IBA 9.6.1: the destination QPN of every multicast packet.
    pub const MULTICAST: Qpn = Qpn(Self::MASK);

    /// `n` as a QPN, or None when it does not fit 24 bits.
    pub const fn new(n: u32) -> Option<Qpn> {
        if n & !Self::MASK == 0 {
            Some(Qpn(n))
        } else {
            None
        }
    }
    /// The low 24 bits of a header word (BTH DestQP, DETH SrcQP).
    pub const fn from_wire(word: u32) -> Qpn {
        Qpn(word & Self::MASK)
    }
    /// A word as software wrote it into a queue entry or command; check it with
    /// [`is_valid`](Self::is_valid) before acting on it.
    pub const fn from_raw(word: u32) -> Qpn {
        Qpn(word)
    }
    pub const fn get(self) -> u32 {
        self.0
    }
    /// It fits 24 bits.
    pub const fn is_valid(self) -> bool {
        self.0 & !Self::MASK == 0
    }
}

/// A 24-bit sequence number in serial arithmetic (IBA 9.7.1): packet sequence numbers, and
/// message sequence numbers (`Seq24<Msn>`, the AETH's MSN) which count the same way but must
/// never be mixed with PSNs.
#[repr(transparent)]
pub struct Seq24<K>(u32, core::marker::PhantomData<K>);

/// Marks [`Seq24`] as a packet sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PsnKind {}
/// Marks [`Seq24`] as a message sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsnKind {}

/// A packet sequence number (BTH PSN; QP attributes `sq_psn`, `rq_psn`).
pub type Psn = Seq24<PsnKind>;
/// A message sequence number (AETH MSN).
pub type Msn = Seq24<MsnKind>;

// Derives would require the marker to implement each trait; these need nothing of it.
impl<K> Clone for Seq24<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Seq24<K> {}
impl<K> PartialEq for Seq24<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<K> Eq for Seq24<K> {}
impl<K> Default for Seq24<K> {
    fn default() -> Self {
        Seq24(0, core::marker::PhantomData)
    }
}
impl<K> core::hash::Hash for Seq24<K> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}
impl<K> core::fmt::Debug for Seq24<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

impl<K> Seq24<K> {
    /// The bits a sequence number uses.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Half the sequence space: a number at most this far ahead of another is after it.
    const HALF: u32 = 1 << 23;

    /// `n` as a sequence number, or None when it does not fit 24 bits.
    pub const fn new(n: u32) -> Option<Self> {
        if n & !Self::MASK == 0 {
            Some(Seq24(n, core::marker::PhantomData))
        } else {
            None
        }
    }
    /// The low 24 bits of a header word or counter.
    pub const fn from_wire(word: u32) -> Self {
        Seq24(word & Self::MASK, core::marker::PhantomData)
    }
    /// A word as software wrote it into a command; check it with
    /// [`is_valid`](Self::is_valid) before acting on it.
    pub const fn from_raw(word: u32) -> Self {
        Seq24(word, core::marker::PhantomData)
    }
    pub const fn get(self) -> u32 {
        self.0
    }
    /// It fits 24 bits.
    pub const fn is_valid(self) -> bool {
        self.0 & !Self::MASK == 0
    }
    /// `n` places later, wrapping at 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self::from_wire(self.0.wrapping_add(n))
    }
    /// `n` places earlier, wrapping at 2^24.
    pub const fn sub(self, n: u32) -> Self {
        Self::from_wire(self.0.wrapping_sub(n))
    }
    /// The next number.
    pub const fn next(self) -> Self {
        self.add(1)
    }
    /// The previous number.
    pub const fn prev(self) -> Self {
        self.sub(1)
    }
    /// How many places `self` is after `earlier`, wrapping: `earlier.add(d) == self`.
    pub const fn distance_from(self, earlier: Self) -> u32 {
        self.0.wrapping_sub(earlier.0) & Self::MASK
    }
    /// Signed distance from `other` to `self` in serial order: positive when `self` is after
    /// `other`, negative when before, 0 when equal (range -2^23..2^23).
    pub const fn diff(self, other: Self) -> i32 {
        let d = self.distance_from(other);
        if d >= Self::HALF {
            d as i32 - (1 << 24)
        } else {
            d as i32
        }
    }
    /// `self` comes after `other` in serial order.
    pub const fn after(self, other: Self) -> bool {
        self.diff(other) > 0
    }
    /// `self` comes before `other` in serial order.
    pub const fn before(self, other: Self) -> bool {
        self.diff(other) < 0
    }
    /// `first <= self <= last` in serial order.
    pub const fn within(self, first: Self, last: Self) -> bool {
        self.diff(first) >= 0 && self.diff(last) <= 0
    }
}

/// A memory key: an MR's lkey/rkey or a memory window's rkey, `index << INDEX_SHIFT |
/// variant`, with [`Key::WINDOW_FLAG`] set for windows. The index names the object; the
/// variant (random at creation, chosen again at each fast registration or type 2 bind, bumped
/// at each type 1 bind) makes keys unguessable from one another and stale keys invalid.
#[repr(transparent)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(u32);

impl Key {
    /// Memory window rkeys have this bit set; MR keys never do.
    pub const WINDOW_FLAG: u32 = 1 << 31;
    /// Bits below the index.
    pub const INDEX_SHIFT: u32 = 8;
    /// The bits that change from binding to binding.
    pub const VARIANT_MASK: u32 = (1 << Self::INDEX_SHIFT) - 1;
    /// The largest index a key can carry (the window flag is above it).
    pub const MAX_INDEX: u32 = (Self::WINDOW_FLAG - 1) >> Self::INDEX_SHIFT;

    /// A key word as software or the wire carries it (any word is a key; whether it names
    /// anything is for the owner of the key table to say).
    pub const fn from_raw(word: u32) -> Key {
        Key(word)
    }
    /// The key of the MR at `index` with `variant`.
    pub const fn region(index: u32, variant: u8) -> Key {
        Key(((index & Self::MAX_INDEX) << Self::INDEX_SHIFT) | variant as u32)
    }
    /// The rkey of the memory window at `index` with `variant`.
    pub const fn window(index: u32, variant: u8) -> Key {
        Key(Self::WINDOW_FLAG | Self::region(index, variant).0)
    }
    pub const fn get(self) -> u32 {
        self.0
    }
    /// It names a memory window.
    pub const fn is_window(self) -> bool {
        self.0 & Self::WINDOW_FLAG != 0
    }
    /// The object's index (without the window flag).
    pub const fn index(self) -> u32 {
        (self.0 & !Self::WINDOW_FLAG) >> Self::INDEX_SHIFT
    }
    /// The low byte, which changes from binding to binding.
    pub const fn variant(self) -> u8 {
        (self.0 & Self::VARIANT_MASK) as u8
    }
    /// The same object with another variant.
    pub const fn with_variant(self, variant: u8) -> Key {
        Key(self.0 & !Self::VARIANT_MASK | variant as u32)
    }
}

// `{:#x}` in log and error messages prints the number as the wire and the specs show it.
impl core::fmt::LowerHex for Qpn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::LowerHex::fmt(&self.0, f)
    }
}
impl core::fmt::LowerHex for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::LowerHex::fmt(&self.0, f)
    }
}

const _: () = assert!(core::mem::size_of::<Qpn>() == 4);
const _: () = assert!(core::mem::size_of::<Psn>() == 4);
const _: () = assert!(core::mem::size_of::<Key>() == 4);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpn_range() {
        assert_eq!(Qpn::new(0x00ff_ffff), Some(Qpn::MULTICAST));
        assert_eq!(Qpn::new(0x0100_0000), None);
        assert_eq!(Qpn::from_wire(0xab12_3456).get(), 0x12_3456);
        assert!(!Qpn::from_raw(0x0100_0001).is_valid());
    }

    #[test]
    fn psn_serial_order_wraps() {
        let last = Psn::new(Psn::MASK).unwrap();
        assert_eq!(last.next().get(), 0);
        assert_eq!(Psn::default().prev(), last);
        assert!(Psn::default().after(last));
        assert!(last.before(Psn::default()));
        assert_eq!(Psn::from_wire(5).diff(last), 6);
        assert_eq!(last.diff(Psn::from_wire(5)), -6);
        assert_eq!(Psn::from_wire(3).distance_from(last), 4);
        assert!(Psn::from_wire(1).within(last, Psn::from_wire(2)));
        assert!(!Psn::from_wire(3).within(last, Psn::from_wire(2)));
        // Half the space ahead is still "after"; one more is "before".
        assert_eq!(
            Psn::from_wire((1 << 23) - 1).diff(Psn::default()),
            (1 << 23) - 1
        );
        assert_eq!(Psn::from_wire(1 << 23).diff(Psn::default()), -(1 << 23));
        assert_eq!(Psn::new(1 << 24), None);
        assert!(!Psn::from_raw(1 << 24).is_valid());
    }

    #[test]
    fn key_parts() {
        let mr = Key::region(0x12_3456, 0x9a);
        assert_eq!(mr.get(), 0x1234_569a);
        assert_eq!(
            (mr.index(), mr.variant(), mr.is_window()),
            (0x12_3456, 0x9a, false)
        );
        let mw = Key::window(7, 1);
        assert_eq!(mw.get(), 0x8000_0701);
        assert_eq!((mw.index(), mw.variant(), mw.is_window()), (7, 1, true));
        assert_eq!(mw.with_variant(2).get(), 0x8000_0702);
        assert_eq!(Key::region(Key::MAX_INDEX, 0).index(), Key::MAX_INDEX);
        assert!(!Key::region(Key::MAX_INDEX, 0xff).is_window());
    }
}
