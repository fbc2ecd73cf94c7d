//! Generates the provider ABI from rdma-core's own headers: bindgen over `infiniband/driver.h`
//! (which pulls in `verbs.h`, `kern-abi.h`, `cmd_ioctl.h`, `config.h` and the kernel uverbs
//! headers) of the rdma-core build tree named by `ROX_RDMA_CORE_BUILD`
//! (scripts/build-provider.sh prepares it). Nothing of that ABI is written by hand in this crate.

use std::env;
use std::fs;
use std::path::PathBuf;

/// The rdma-core build tree (the directory holding `include/`).
const RDMA_CORE_BUILD_ENV: &str = "ROX_RDMA_CORE_BUILD";
/// `config.h` macro that names the private ABI (`verbs_register_driver_<N>`).
const PABI_MACRO: &str = "IBVERBS_PABI_VERSION";
/// A directory holding the two files this script generates (`rdma_core.rs`, `pabi.rs`), kept by
/// an earlier build in the root (scripts/build-provider.sh): lint runs on the host
/// (scripts/quality.sh) reuse them instead of running bindgen without the root's headers.
const PREGENERATED_ENV: &str = "ROX_PROVIDER_BINDINGS";
/// The generated files.
const GENERATED: [&str; 2] = ["rdma_core.rs", "pabi.rs"];

fn main() {
    println!("cargo:rerun-if-env-changed={PREGENERATED_ENV}");
    if let Some(dir) = env::var_os(PREGENERATED_ENV).map(PathBuf::from) {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        for name in GENERATED {
            let from = dir.join(name);
            println!("cargo:rerun-if-changed={}", from.display());
            fs::copy(&from, out.join(name))
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", from.display()));
        }
        return;
    }
    println!("cargo:rerun-if-env-changed={RDMA_CORE_BUILD_ENV}");
    println!("cargo:rerun-if-changed=src/rdma_core.h");
    let build = env::var_os(RDMA_CORE_BUILD_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "{RDMA_CORE_BUILD_ENV} is not set: build librox with scripts/build-provider.sh, \
             which prepares an rdma-core build tree and sets it"
            )
        });
    let include = build.join("include");
    let config_h = include.join("config.h");
    println!("cargo:rerun-if-changed={}", config_h.display());

    let pabi = read_pabi(&config_h);

    let bindings = bindgen::Builder::default()
        .header("src/rdma_core.h")
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_function("ibv_cmd_.*")
        .allowlist_function("verbs_.*")
        .allowlist_function("_verbs_init_and_alloc_context")
        .allowlist_function("__verbs_log")
        .allowlist_function("ibv_dontfork_range")
        .allowlist_function("ibv_dofork_range")
        .allowlist_type("verbs_.*")
        .allowlist_type("ibv_.*")
        .allowlist_type("ib_uverbs_.*")
        .allowlist_type("rdma_driver_id")
        .allowlist_var("IBVERBS_PABI_VERSION")
        .allowlist_var("VERBS_.*")
        .allowlist_var("RDMA_DRIVER_.*")
        .allowlist_var("IBV_.*")
        .allowlist_var("IB_UVERBS_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .formatter(bindgen::Formatter::Prettyplease)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on rdma-core's infiniband/driver.h");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("rdma_core.rs"))
        .expect("cannot write the generated bindings");

    // The registration symbol carries the private ABI number; name it once, from config.h.
    fs::write(
        out.join("pabi.rs"),
        format!(
            "/// rdma-core's private provider ABI (`IBVERBS_PABI_VERSION` of config.h).\n\
             pub const PABI_VERSION: u32 = {pabi};\n\
             pub use super::verbs_register_driver_{pabi} as verbs_register_driver;\n"
        ),
    )
    .expect("cannot write pabi.rs");

    // DT_NEEDED libibverbs.so.1: pyverbs loads libibverbs RTLD_LOCAL, so the provider must
    // bring its own reference to resolve verbs_register_driver_<N> and the ibv_cmd_* calls.
    println!("cargo:rustc-link-lib=dylib=ibverbs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librox-rdmav{pabi}.so");
    // Every symbol must resolve at link time (against libibverbs 56.1), not at dlopen.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
}

fn read_pabi(config_h: &PathBuf) -> u32 {
    let text = fs::read_to_string(config_h)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", config_h.display()));
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix("#define ")?.trim();
            let value = rest.strip_prefix(PABI_MACRO)?.trim();
            value.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {PABI_MACRO} in {}", config_h.display()))
}
