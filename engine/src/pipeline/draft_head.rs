//! The draft head's options (`serve --proposers mtp --mtp-head DIR`), checked against the served
//! model at role 0's start-up, and the live head they build in the last role (`spec::head::live`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::weights_source::WeightsSource;

/// The draft head the last role runs (`spec::head::live`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MtpOptions {
    /// The head's export directory (`moefleet-harness fit-draft`).
    pub head: PathBuf,
    /// Drafts per sampled row: the head's first modules.
    pub drafts: usize,
    /// Unembedding rows the drafts are chosen from (None: the whole vocabulary).
    pub rows: Option<usize>,
    /// A row's drafts end at the first the head gives a probability below this.
    #[serde(default)]
    pub p_min: f32,
}

impl MtpOptions {
    /// The head for a model of `weights`, checked against it.
    pub fn check(&self, weights: &WeightsSource) -> anyhow::Result<()> {
        let cfg = crate::spec::head::draft_config(&weights.config()?);
        let m = crate::spec::head::io::manifest(&self.head)?;
        anyhow::ensure!(
            m.config == cfg,
            "the draft head {} was made for {} (hidden {}, vocabulary {}), the model is {}",
            self.head.display(),
            m.config.name,
            m.config.hidden,
            m.config.vocab_size,
            cfg.name
        );
        // a control's head fits only its first modules, the rest keep synthetic weights
        let n = m.fitted_modules();
        if n < m.modules.len() {
            anyhow::ensure!(
                self.drafts <= n,
                "the draft head {}: only its first {n} of {} modules were fitted (a control's \
                 fit), and --mtp-drafts {} would draft from the unfitted ones",
                self.head.display(),
                m.modules.len(),
                self.drafts
            );
        }
        anyhow::ensure!(
            matches!(weights, WeightsSource::Gguf(_)),
            "the draft head drafts live only for a GGUF model (--model FILE.gguf)"
        );
        anyhow::ensure!(
            (1..=m.modules.len()).contains(&self.drafts),
            "--mtp-drafts must be in 1..={} (the head's modules)",
            m.modules.len()
        );
        if let Some(r) = self.rows {
            anyhow::ensure!(
                (1..=cfg.vocab_size).contains(&r),
                "--mtp-rows must be in 1..={} (the vocabulary)",
                cfg.vocab_size
            );
        }
        Ok(())
    }

    /// The last role's live head, for streams of at most `budget` positions.
    pub fn build(
        &self,
        weights: &WeightsSource,
        budget: usize,
    ) -> anyhow::Result<crate::spec::head::live::LiveHead> {
        self.check(weights)?;
        let WeightsSource::Gguf(path) = weights else {
            anyhow::bail!("the draft head drafts live only for a GGUF model");
        };
        let shared = crate::spec::head::Shared::from_gguf(path)?;
        let (head, _) = crate::spec::head::io::load(&self.head)?;
        let rows = self.rows.unwrap_or(shared.vocab_size());
        Ok(
            crate::spec::head::live::LiveHead::new(head, shared, self.drafts, rows, budget, true)?
                .with_p_min(self.p_min),
        )
    }
}
