//! Every experiment, in the order the main job runs them (a unit depends only on units above it:
//! the simulator on the sweep's frames and on the ceilings and backends records, speculation on the
//! head the draft unit fits), then those a make target of their own runs. `verify` re-derives the
//! committed runs of each unit's rechecks, in this order. Adding an experiment: its folder
//! implements [`Experiment`] (and [`Recheck`] for its committed runs, listed in
//! `reproduction/claims.toml` under the implementation's key), and one line here names it.

use crate::experiments::unit::Experiment;
use crate::recheck::Recheck;

pub static EXPERIMENTS: [&dyn Experiment; 15] = [
    &crate::analysis::unit::Sweep,
    &super::ceilings::unit::Ceilings,
    &super::dense::unit::Dense,
    &super::backends::unit::Backends,
    &super::context::unit::Context,
    &super::draft::unit::Draft,
    &super::speculation::unit::Speculation,
    &super::figure6::Figure6,
    &crate::simulate::unit::Simulator,
    &super::peer::unit::Peer,
    &super::parity::unit::Parity,
    &super::links::unit::Links,
    &super::load::unit::Load,
    &super::load::conversations::Conversations,
    &crate::reliability::unit::Reliability,
];

/// Every kind of committed run `verify` re-derives, unit by unit.
pub fn rechecks() -> impl Iterator<Item = &'static dyn Recheck> {
    EXPERIMENTS
        .iter()
        .flat_map(|e| e.rechecks().iter().copied())
}

/// The re-derivation listed under `key`.
pub fn find(key: &str) -> Option<&'static dyn Recheck> {
    rechecks().find(|r| r.key() == key)
}

/// The experiment named `name`.
pub fn experiment(name: &str) -> Option<&'static dyn Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.name() == name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn keys_and_names_are_unique() {
        let mut keys: Vec<_> = rechecks().map(|r| r.key()).collect();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n);
        assert_eq!(n, 17, "every kind of committed run has its unit");
        let mut names: Vec<_> = EXPERIMENTS.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EXPERIMENTS.len());
    }

    #[test]
    fn the_main_job_runs_a_unit_after_those_it_reads() {
        let pos = |n: &str| {
            EXPERIMENTS
                .iter()
                .filter(|e| e.in_main_job())
                .position(|e| e.name() == n)
                .unwrap()
        };
        assert!(pos("sweep") < pos("simulator"));
        assert!(pos("ceilings") < pos("simulator"));
        assert!(pos("backends") < pos("simulator"));
        assert!(pos("draft") < pos("speculation"));
        assert!(EXPERIMENTS.iter().filter(|e| e.in_main_job()).count() == 9);
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
