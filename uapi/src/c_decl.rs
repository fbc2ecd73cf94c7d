//! `c_struct!`: a `#[repr(C)]` struct together with its C declaration, so C programs that speak
//! the same interface (the raw-uverbs negative test) use declarations generated from these
//! definitions (`rox-uapi-header`) instead of a hand copy that could drift.
//!
//! Field types are fixed-width integers or arrays of them. Declared with `#[macro_use]` before the
//! other modules (macro_rules scope is textual), and it names no paths, so it works both in this
//! crate and where rox.ko includes the files by path.

/// `c_struct! { /// docs  pub struct Name as c_name { /// docs  pub field: u32, pub mac: [u8; 6] } }`
/// defines `Name` (`#[repr(C)]`, `Clone, Copy, Default, Debug, PartialEq, Eq`) and
/// `Name::C_DECL`, `"struct c_name { uint32_t field; uint8_t mac[6]; };"`.
macro_rules! c_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident as $c_name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:tt ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: c_struct!(@rust $ty), )*
        }

        impl $name {
            /// This struct's C declaration.
            pub const C_DECL: &'static str = concat!(
                "struct ", stringify!($c_name), " {",
                $( c_struct!(@c_field $field $ty), )*
                " };"
            );
        }
    };
    (@rust [$elem:ident; $len:expr]) => { [$elem; $len] };
    (@rust $ty:ident) => { $ty };
    (@c_field $field:ident [$elem:ident; $len:expr]) => {
        concat!(" ", c_struct!(@c_type $elem), " ", stringify!($field), "[", stringify!($len), "];")
    };
    (@c_field $field:ident $ty:ident) => {
        concat!(" ", c_struct!(@c_type $ty), " ", stringify!($field), ";")
    };
    (@c_type u8) => { "uint8_t" };
    (@c_type u16) => { "uint16_t" };
    (@c_type u32) => { "uint32_t" };
    (@c_type u64) => { "uint64_t" };
    (@c_type Qpn) => { "uint32_t" };
    (@c_type Key) => { "uint32_t" };
}

/// `uapi_enum! { /// docs  pub enum Name { Variant = CONST, ... } }` defines a `#[repr(u8)]` enum
/// whose discriminants are the uapi constants, and `Name::from_u8`, which decodes a number read
/// from a queue entry or command (None for a number that names no variant).
macro_rules! uapi_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:path ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $( $(#[$vmeta])* $variant = $value ),* }

        impl $name {
            /// The variant numbered `value`, if any.
            pub const fn from_u8(value: u8) -> Option<Self> {
                $( if value == $value { return Some($name::$variant); } )*
                None
            }
        }
    };
}

/// `uapi_flags! { /// docs  pub struct Name: u32 { /// docs  FLAG = CONST, ... } }` defines a
/// flag word: a `#[repr(transparent)]` newtype over the integer with one associated const per
/// flag (its value is the uapi constant), `ALL` (every defined flag), `from_bits` (None when an
/// undefined bit is set: a consumer decoding a word from a queue entry refuses it instead of
/// ignoring it), `bits`, `contains`, `intersects` and `|`.
macro_rules! uapi_flags {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $int:ty { $( $(#[$fmeta:meta])* $flag:ident = $value:path ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Hash)]
        pub struct $name($int);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: $name = $name($value); )*
            /// Every flag this word defines.
            pub const ALL: $name = $name(0 $( | $value )*);
            /// No flag.
            pub const fn empty() -> Self {
                $name(0)
            }
            /// The word `bits`, if it sets only defined flags.
            pub const fn from_bits(bits: $int) -> Option<Self> {
                if bits & !Self::ALL.0 == 0 {
                    Some($name(bits))
                } else {
                    None
                }
            }
            /// The raw word, as it sits in the queue entry or register.
            pub const fn bits(self) -> $int {
                self.0
            }
            /// Every flag of `other` is set.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// Some flag of `other` is set.
            pub const fn intersects(self, other: Self) -> bool {
                self.0 & other.0 != 0
            }
            /// Both words' flags.
            pub const fn union(self, other: Self) -> Self {
                $name(self.0 | other.0)
            }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, other: Self) -> Self {
                self.union(other)
            }
        }
    };
}
