//! Finding and loading OpenVINO's C library once per process.
//!
//! The PyPI `openvino` wheel (what `make test` installs) ships `libopenvino_c.so.<version>` in
//! `site-packages/openvino/libs/` with no unversioned name, which `openvino-sys`'s own finder does
//! not look for. `MOEFLEET_OPENVINO_LIB` (the library file or its directory), when set, is the only
//! place looked at; otherwise the wheel's `libs` directory as `python3` (or `$PYTHON`) reports it,
//! then the usual install prefixes. The binaries read those two variables in `main` and hand them
//! over with [`configure`]; nothing here reads the environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Environment variable naming the C library (file) or a directory holding it.
pub const LIB_ENV: &str = "MOEFLEET_OPENVINO_LIB";

static LOADED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();

/// Where to look: what the binaries read from `MOEFLEET_OPENVINO_LIB` and `PYTHON`.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// The library file or a directory holding it: when set, the only place looked at.
    pub lib: Option<PathBuf>,
    /// The Python interpreter asked where the `openvino` wheel is (default `python3`).
    pub python: Option<String>,
}

impl Search {
    /// `MOEFLEET_OPENVINO_LIB` and `PYTHON` as the process's environment has them: for `main`
    /// (and tests, which are their own mains) to hand to [`configure`]; nothing below calls it.
    pub fn from_env() -> Search {
        Search {
            lib: std::env::var_os(LIB_ENV).map(PathBuf::from),
            python: std::env::var("PYTHON").ok(),
        }
    }
}

static SEARCH: OnceLock<Search> = OnceLock::new();

/// Set where [`load`] looks, once, before the first load (a later call, or one after a load,
/// is an error: the library would already have been looked for elsewhere). Without it the
/// defaults apply: the wheel through `python3`, then the usual prefixes.
pub fn configure(search: Search) -> Result<()> {
    if LOADED.get().is_some() {
        return Err(Error::Config(
            "OpenVINO's search path set after the library was loaded".into(),
        ));
    }
    SEARCH
        .set(search)
        .map_err(|_| Error::Config("OpenVINO's search path set twice".into()))
}

/// Load the library (first call) and return the path it was loaded from.
pub fn load() -> Result<PathBuf> {
    LOADED
        .get_or_init(|| {
            let (found, looked) = find();
            let path = found.ok_or_else(|| {
                format!(
                    "OpenVINO's C library (libopenvino_c.so*) was not found; looked in: {}. \
                     Install it with `python3 -m pip install openvino` (make test does) or set \
                     {LIB_ENV} to the library file or its directory",
                    looked.join(", ")
                )
            })?;
            openvino_sys::library::load_from(&path)
                .map_err(|e| format!("loading {}: {e}", path.display()))?;
            Ok(path)
        })
        .clone()
        .map_err(Error::Config)
}

/// The first library found and every place looked at (for the error message).
fn find() -> (Option<PathBuf>, Vec<String>) {
    let mut looked = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let search = SEARCH.get().cloned().unwrap_or_default();
    if let Some(p) = search.lib {
        // set: authoritative
        looked.push(format!("{} (${LIB_ENV})", p.display()));
        if p.is_file() {
            return (Some(p), looked);
        }
        return (in_dir(&p), looked);
    }
    looked.push(format!("${LIB_ENV} (unset)"));
    match wheel_libs(search.python.as_deref().unwrap_or("python3")) {
        Some(d) => dirs.push(d),
        None => looked.push("the python3 `openvino` package (not importable)".into()),
    }
    dirs.extend(
        [
            "/usr/lib",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/local/lib",
            "/opt/intel/openvino/runtime/lib/intel64",
        ]
        .map(PathBuf::from),
    );
    for d in dirs {
        looked.push(d.display().to_string());
        if let Some(p) = in_dir(&d) {
            return (Some(p), looked);
        }
    }
    (None, looked)
}

/// `<site-packages>/openvino/libs`, asking `python` where the package is.
fn wheel_libs(python: &str) -> Option<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import openvino, os; print(os.path.dirname(openvino.__file__))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    Some(Path::new(dir.trim()).join("libs"))
}

/// `libopenvino_c.so` or the highest-versioned `libopenvino_c.so.N` in `dir`.
fn in_dir(dir: &Path) -> Option<PathBuf> {
    let plain = dir.join("libopenvino_c.so");
    if plain.is_file() {
        return Some(plain);
    }
    let mut versioned: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libopenvino_c.so."))
        })
        .collect();
    versioned.sort();
    versioned.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_library_yields_nothing_and_a_versioned_name_is_found() {
        let d = tempfile::tempdir().expect("tempdir");
        assert_eq!(in_dir(d.path()), None);
        std::fs::write(d.path().join("libopenvino_c.so.2600"), b"").expect("write");
        std::fs::write(d.path().join("libopenvino_c.so.2641"), b"").expect("write");
        assert_eq!(
            in_dir(d.path()),
            Some(d.path().join("libopenvino_c.so.2641"))
        );
    }
}
