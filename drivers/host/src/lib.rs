// SPDX-License-Identifier: GPL-2.0
//! rox.ko's modules that need no kernel (pure logic), built on the host so that `cargo test`
//! runs their tests (`logic_tests.rs`, which rox.ko runs as KUnit suites on a kernel with
//! KUnit); the module itself builds the same files with Kbuild. Each is included by path, with
//! `crate::uapi` as in the module's crate root.
#![cfg(test)]

use rox_uapi as uapi;

#[path = "../../wq_record.rs"]
mod wq_record;

#[path = "../../cq_clean.rs"]
mod cq_clean;

#[path = "../../cut_off.rs"]
mod cut_off;

#[path = "../../slot_store.rs"]
mod slot_store;

#[path = "../../query_len.rs"]
mod query_len;

#[path = "../../logic_tests.rs"]
mod logic_tests;
