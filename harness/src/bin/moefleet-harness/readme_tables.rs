//! `moefleet-harness readme-tables`: docs/RESULTS.md's tables rendered from committed records:
//! print each, or with --write put them between their markers in ROOT/docs/RESULTS.md.

use std::path::PathBuf;

use anyhow::Context;
use moefleet_harness::claims;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = ".")]
    root: PathBuf,
    #[arg(long)]
    write: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { root, write } = args;
    use moefleet_harness::claims::readme_tables;
    let f = claims::load(&root)?;
    let path = root.join(readme_tables::RESULTS_MD);
    let mut readme =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for t in &f.readme_tables {
        let fresh = readme_tables::render(&root, t).with_context(|| format!("table {}", t.name))?;
        if write {
            readme = readme_tables::replace(&readme, &t.name, &fresh)?;
        } else {
            println!("{}\n{fresh}", readme_tables::begin_marker(&t.name));
        }
    }
    if write {
        std::fs::write(&path, readme)?;
        eprintln!(
            "readme-tables: {} tables written into {}",
            f.readme_tables.len(),
            path.display()
        );
    }
    Ok(())
}
