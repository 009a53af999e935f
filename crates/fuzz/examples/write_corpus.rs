//! Writes each target's seeds (`polypath_fuzz::seeds`) into `DIR/<target>/seed-<n>`, the
//! cargo-fuzz corpus layout: `cargo run -p polypath-fuzz --example write_corpus -- DIR`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for target in polypath_fuzz::TARGETS {
        let out = dir.join(target.name);
        std::fs::create_dir_all(&out)?;
        for (i, seed) in polypath_fuzz::seeds::seeds(target.name).iter().enumerate() {
            std::fs::write(out.join(format!("seed-{i}")), seed)?;
        }
    }
    Ok(())
}
