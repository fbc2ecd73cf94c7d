//! Where things are: the clone, the cache and what `make setup` put there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::host;

/// Where things are: the clone, the cache and what `make setup` put there (asked from
/// scripts/lib.sh, the one definition of the cache layout).
pub struct Paths {
    pub top: PathBuf,
    pub cache: PathBuf,
    pub root: PathBuf,
    pub kernel: PathBuf,
    pub nic_bin: PathBuf,
}

impl Paths {
    pub fn find(flavour: &str) -> Result<Paths> {
        let top = find_top()?;
        let out = host::run(
            Command::new("bash")
                .arg("-c")
                .arg(r#"set -e; . "$1/scripts/lib.sh"; echo "$ROX_CACHE"; root_dir; kernel_dir "$2""#)
                .arg("_")
                .arg(&top)
                .arg(flavour),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines().map(PathBuf::from);
        let (Some(cache), Some(root), Some(kernel)) = (lines.next(), lines.next(), lines.next())
        else {
            bail!("scripts/lib.sh did not name the cache, root and kernel directories");
        };
        if !root.join(".complete").exists() {
            bail!("no toolchain root in {}; run 'make setup'", cache.display());
        }
        if !kernel.join(".complete").exists() {
            bail!(
                "no {flavour} kernel in {}; run 'make setup' (ROX_KERNEL_FLAVOUR={flavour})",
                cache.display()
            );
        }
        let nic_bin = std::env::var_os("ROX_NIC_BIN")
            .map_or_else(|| top.join("target/release/rox-nic"), PathBuf::from);
        Ok(Paths {
            top,
            cache,
            root,
            kernel,
            nic_bin,
        })
    }

    /// The path QEMU and tcpdump (in scripts/in-root, the cache at /cache) see for `p`.
    pub fn in_root(&self, p: &Path) -> Result<PathBuf> {
        let rel = p.strip_prefix(&self.cache).with_context(|| {
            format!(
                "{} is not under the cache {}",
                p.display(),
                self.cache.display()
            )
        })?;
        Ok(Path::new("/cache").join(rel))
    }

    pub fn in_root_cmd(&self) -> Command {
        let mut c = Command::new(self.top.join("scripts/in-root"));
        c.env("ROX_TOP", &self.top).env("ROX_CACHE", &self.cache);
        c
    }
}

/// The clone: $ROX_TOP, else the directory holding scripts/lib.sh above this binary or the
/// current directory.
fn find_top() -> Result<PathBuf> {
    if let Some(t) = std::env::var_os("ROX_TOP") {
        return Ok(PathBuf::from(t));
    }
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    starts.push(std::env::current_dir()?);
    for s in starts {
        for dir in s.ancestors() {
            if dir.join("scripts/lib.sh").is_file() && dir.join("qemu/guest-init").is_file() {
                return Ok(dir.to_path_buf());
            }
        }
    }
    bail!("cannot find the rox clone (set ROX_TOP)")
}
