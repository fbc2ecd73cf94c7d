// SPDX-License-Identifier: GPL-2.0
//! Raw bindings to ib_core and the few network-stack items rox needs, generated at build time
//! by bindgen from `drivers/ib/bindings_helper.h` (see `Kbuild`). Nothing here is hand-written
//! layout: every struct comes from the C headers of the kernel the module is built against.
//!
//! Only the wrapper layer (`drivers/ib/*.rs`) uses these items directly.

#[allow(
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    // Lints the kernel's Rust flags enable one by one (outside clippy::all), which bindgen's
    // output trips everywhere; the kernel's own bindings crate allows the same ones.
    clippy::as_underscore,
    clippy::cast_lossless,
    clippy::ptr_as_ptr,
    clippy::ptr_cast_constness,
    clippy::ref_as_ptr,
    clippy::undocumented_unsafe_blocks
)]
mod generated {
    use kernel::ffi;
    use pin_init::{MaybeZeroable, Zeroable};

    // The kernel's rust/bindgen_parameters blocklists these; it maps them the same way.
    type __kernel_size_t = usize;
    type __kernel_ssize_t = isize;
    type __kernel_ptrdiff_t = isize;

    // SAFETY: `__BindgenBitfieldUnit<Storage>` is a newtype around `Storage`, so it is zeroable
    // exactly when `Storage` is (same impl as the kernel's `bindings` crate).
    unsafe impl<Storage> Zeroable for __BindgenBitfieldUnit<Storage> where Storage: Zeroable {}

    include!(env!("ROX_IB_BINDINGS"));
}

pub(crate) use generated::*;
