//! Writes each fuzz target's seed inputs (rox_nic::fuzzing::seeds) into `corpus/<target>/`,
//! named by content, so a run starts from packets and commands the host tests know work.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in rox_nic::fuzzing::TARGETS {
        let dir = root.join(target.name);
        std::fs::create_dir_all(&dir)?;
        let seeds = rox_nic::fuzzing::seeds(target.name);
        for seed in &seeds {
            let mut h = crc32fast::Hasher::new();
            h.update(seed);
            std::fs::write(dir.join(format!("seed-{:08x}", h.finalize())), seed)?;
        }
        println!(
            "{}: {} seeds in {}",
            target.name,
            seeds.len(),
            dir.display()
        );
    }
    Ok(())
}
