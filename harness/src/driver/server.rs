//! The server under test, one handle for every experiment that talks to one: its base URL and
//! model, whether it offers moefleet's `/api/stats` and `/api/profile`, their reads, and the idle
//! gate before a measurement.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{get_json, http_client};

/// Timeout of the small GETs (models, stats, profile).
pub const GET_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct Server {
    pub http: reqwest::Client,
    /// Base URL, no trailing slash.
    pub base: String,
    /// The first model of `/v1/models`.
    pub model: String,
    /// `/api/stats` and `/api/profile` at connection (None: the server has no such route).
    pub first_stats: Option<Value>,
    pub first_profile: Option<Value>,
}

impl Server {
    /// Check the URL, ask `/v1/models` for the model and probe the optional routes.
    pub async fn connect(url: &str) -> anyhow::Result<Server> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must start with http:// or https:// (got '{url}')");
        }
        let http = http_client()?;
        let model = get_json(&http, &format!("{base}/v1/models"), GET_TIMEOUT)
            .await
            .and_then(|m| m["data"][0]["id"].as_str().map(str::to_string))
            .ok_or_else(|| {
                anyhow::anyhow!("{base}/v1/models did not answer with a model; is the server up?")
            })?;
        let first_stats = get_json(&http, &format!("{base}/api/stats"), GET_TIMEOUT).await;
        let first_profile = get_json(&http, &format!("{base}/api/profile"), GET_TIMEOUT).await;
        Ok(Server {
            http,
            base,
            model,
            first_stats,
            first_profile,
        })
    }

    /// `/api/stats` if the server has it.
    pub fn stats_url(&self) -> Option<String> {
        self.first_stats
            .as_ref()
            .map(|_| format!("{}/api/stats", self.base))
    }

    /// `/api/stats` now (None: no such route, or this read failed).
    pub async fn stats(&self) -> Option<Value> {
        get_json(&self.http, &self.stats_url()?, GET_TIMEOUT).await
    }

    /// `/api/profile` now (None: no such route, or this read failed).
    pub async fn profile(&self) -> Option<Value> {
        self.first_profile.as_ref()?;
        get_json(
            &self.http,
            &format!("{}/api/profile", self.base),
            GET_TIMEOUT,
        )
        .await
    }

    /// A field of the stats read at connection (`engine_version`, `engine_commit`).
    pub fn first_stat(&self, key: &str) -> Value {
        self.first_stats
            .as_ref()
            .and_then(|s| s.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Roles the server reports (`/api/profile` lists one entry per role).
    pub fn roles(&self) -> Option<usize> {
        self.first_profile
            .as_ref()?
            .get("roles")?
            .as_array()
            .map(Vec::len)
    }

    /// Wait until `/api/stats` reports no request in flight, reading it every `every` for at most
    /// `max`. None: idleness is unknown (the server has no stats, or its stats have no
    /// `requests_in_flight`). Some(true): a read said idle. Some(false): none did within `max`; a
    /// failed read counts as not idle, never as idle.
    pub async fn wait_idle(&self, max: Duration, every: Duration) -> Option<bool> {
        self.stats_url()?;
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.stats().await {
                match s.get("requests_in_flight").and_then(Value::as_u64) {
                    Some(0) => return Some(true),
                    None => return None,
                    Some(_) => {}
                }
            }
            if t0.elapsed() >= max {
                return Some(false);
            }
            tokio::time::sleep(every).await;
        }
    }
}
