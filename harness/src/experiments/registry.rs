//! Every experiment `verify` re-derives, in the order it runs them. Adding an experiment: its
//! folder implements [`Recheck`] for its committed runs, one line here names it, and
//! `reproduction/claims.toml` lists its runs under the implementation's key.

use crate::recheck::Recheck;

pub static RECHECKS: [&dyn Recheck; 16] = [
    &crate::analysis::recheck::SweepRuns,
    &super::speculation::recheck::SpeculationRuns,
    &super::peer::recheck::PeerRuns,
    &super::parity::recheck::ParityRuns,
    &super::context::recheck::ContextScans,
    &super::context::recheck::ContextFits,
    &crate::figures::recheck::Figure6Runs,
    &super::ceilings::recheck::CeilingsRecords,
    &super::context::recheck::ContextProbes,
    &super::dense::recheck::DenseRuns,
    &super::draft::recheck::DraftRuns,
    &crate::simulate::recheck::Validations,
    &crate::simulate::recheck::PaperComparisons,
    &crate::reliability::recheck::ReliabilityRuns,
    &super::links_recheck::LinkFleets,
    &super::links_recheck::LinkTbf,
];

/// The implementation listed under `key`.
pub fn find(key: &str) -> Option<&'static dyn Recheck> {
    RECHECKS.iter().copied().find(|r| r.key() == key)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn keys_are_unique() {
        let mut keys: Vec<_> = RECHECKS.iter().map(|r| r.key()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), RECHECKS.len());
    }

    #[test]
    fn a_list_no_experiment_claims_is_refused_and_a_known_one_read() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("reproduction")).unwrap();
        let write = |extra: &str| {
            std::fs::write(
                t.path().join("reproduction/claims.toml"),
                format!("{extra}\n[[section]]\ntitle = \"t\"\nintro = \"i\"\nclaim = []\n"),
            )
            .unwrap()
        };
        write("dense_runs = [\"results/a\"]\nsimulator_paper = [{ out = \"o\", local = \"l\", paper = \"p\" }]");
        let f = crate::claims::load(t.path()).unwrap();
        assert_eq!(f.runs_of("dense_runs"), ["results/a"]);
        assert_eq!(f.runs_of("simulator_paper"), ["o"]);
        write("densse_runs = [\"results/a\"]");
        let e = format!("{:#}", crate::claims::load(t.path()).unwrap_err());
        assert!(e.contains("unknown key \"densse_runs\""), "{e}");
    }
}
