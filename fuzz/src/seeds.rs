//! A target's committed seed files (`fuzz/seeds/TARGET/`) against the corpus its `seed_corpus`
//! generates: the comparison both targets' tests make, and the writing their ignored
//! `write_seeds` tests do.

use std::path::Path;

/// Whether `dir` holds exactly `corpus` (the same names, the same bytes); Err says what differs.
pub fn compare(dir: &Path, corpus: &[(String, Vec<u8>)]) -> Result<(), String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut want: Vec<&String> = corpus.iter().map(|(n, _)| n).collect();
    want.sort();
    if names.iter().ne(want.iter().copied()) {
        return Err(format!(
            "{} holds {names:?}, the corpus {want:?}",
            dir.display()
        ));
    }
    for (name, bytes) in corpus {
        let got = std::fs::read(dir.join(name)).map_err(|e| format!("seed {name}: {e}"))?;
        if &got != bytes {
            return Err(format!("seed {name} differs from the corpus"));
        }
    }
    Ok(())
}

/// Write `corpus` into `dir`.
pub fn write(dir: &Path, corpus: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in corpus {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}
