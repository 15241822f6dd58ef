//! `run.json`: the typed manifest of a sweep, written when it starts (`complete: false`) and again
//! when it ends; what ran (server, model, the engine's build as its `/api/stats` reports it, the
//! harness's checkout, plan), where (host facts, load average at both ends) and when. Read back
//! leniently: runs written before a field existed leave it empty.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunManifest {
    /// Always `sweep_run`.
    pub record: String,
    pub url: String,
    /// The first model of the server's `/v1/models`.
    pub model: String,
    /// The server's own version and build commit (moefleet reports them in `/api/stats`).
    pub engine_version: Option<String>,
    pub engine_commit: Option<String>,
    /// The harness checkout's commit (not the engine's: a fleet may run another build).
    pub git_commit: Option<String>,
    /// The commit the harness binary was built from (`-dirty` when its tree had changes): the
    /// checkout's commit says which repository ran it, this which code.
    pub harness_commit: Option<String>,
    /// The server's pipeline groups of slots (moefleet's `/api/stats` `pipeline_groups`; `serve
    /// --groups`, by default one per role): which configuration of the fleet was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_groups: Option<u64>,
    pub plan: Value,
    pub ignore_eos: bool,
    pub host: Value,
    pub load_average_start: Option<[f64; 3]>,
    pub load_average_end: Option<[f64; 3]>,
    /// The server answered `/api/stats` when the sweep connected.
    pub stats_available: bool,
    /// Epoch seconds of the run's monotonic-clock origin.
    pub clock_origin_epoch: f64,
    pub start: f64,
    pub end: Option<f64>,
    pub complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Stopped by Ctrl-C (finished phases and finished requests' traces kept; `sweep --resume`).
    pub interrupted: bool,
    /// Epoch seconds of each `sweep --resume`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<f64>,
}

impl RunManifest {
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let p = dir.join("run.json");
        crate::json::write(&p, self)
    }

    pub fn read(dir: &Path) -> anyhow::Result<RunManifest> {
        let p = dir.join("run.json");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_and_an_old_partial_one_reads() {
        let dir = tempfile::tempdir().unwrap();
        let m = RunManifest {
            record: "sweep_run".into(),
            model: "m".into(),
            engine_commit: Some("abc".into()),
            pipeline_groups: Some(11),
            load_average_start: Some([0.5, 0.25, 0.125]),
            error: Some("stopped".into()),
            ..Default::default()
        };
        m.write(dir.path()).unwrap();
        let back = RunManifest::read(dir.path()).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&m).unwrap()
        );
        std::fs::write(
            dir.path().join("run.json"),
            r#"{"url": "u", "model": "m", "extra": 1}"#,
        )
        .unwrap();
        let old = RunManifest::read(dir.path()).unwrap();
        assert_eq!(
            (old.url.as_str(), old.engine_commit, old.pipeline_groups),
            ("u", None, None)
        );
        std::fs::write(dir.path().join("run.json"), "{").unwrap();
        assert!(RunManifest::read(dir.path()).is_err());
    }
}
