//! Per-stream state of a range of layers: KV caches (f32; a ring of `window + rewind_slack`
//! positions on sliding layers, a cache growing up to the stream's context budget on global layers)
//! and the input histories of the four short convolutions.
//!
//! State has one door: the forward pass writes position `pos + i` of a frame's rows through
//! `LayerState` and then `commit`s; otherwise it changes only through `truncate` (rewind to a
//! position, within the rewind slack) and `reset`.

use super::config::{AttentionKind, ModelConfig};
use crate::error::{Error, Result};

/// Input history of one short convolution: a ring of the last `k − 1 + slack` inputs, by position.
#[derive(Clone, Debug)]
pub struct ConvHistory {
    channels: usize,
    k: usize,
    cap: usize,
    buf: Vec<f32>,
    zeros: Vec<f32>,
}

impl ConvHistory {
    fn new(channels: usize, k: usize, slack: usize) -> Self {
        // no history without taps to read it (k = 1: the checkpoint families have no convolutions)
        let cap = if k <= 1 { 0 } else { k - 1 + slack + 1 };
        ConvHistory {
            channels,
            k,
            cap,
            buf: vec![0.0; cap * channels],
            zeros: vec![0.0; channels],
        }
    }

    /// `[u_{p−1}, …, u_{p−k+1}]`, zeros before position 0.
    pub fn before(&self, p: usize) -> Vec<&[f32]> {
        (1..self.k)
            .map(|j| {
                if p >= j {
                    let s = (p - j) % self.cap;
                    &self.buf[s * self.channels..(s + 1) * self.channels]
                } else {
                    &self.zeros[..]
                }
            })
            .collect()
    }

    /// Record the input at position p.
    pub fn record(&mut self, p: usize, u: &[f32]) {
        if self.cap == 0 {
            return;
        }
        let s = p % self.cap;
        self.buf[s * self.channels..(s + 1) * self.channels].copy_from_slice(u);
    }
}

/// Keys and values of one layer, stored per KV head with positions contiguous
/// (`[n_kv][slot][head_dim]`), so a head's keys are one or two contiguous blocks.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub kind: AttentionKind,
    pub n_kv: usize,
    pub head_dim: usize,
    /// Ring capacity (sliding) or allocated positions (global, grows on demand).
    cap: usize,
    ring: bool,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

impl KvCache {
    fn new(kind: AttentionKind, n_kv: usize, head_dim: usize, ring_cap: usize) -> Self {
        let (cap, ring) = match kind {
            AttentionKind::Sliding => (ring_cap, true),
            AttentionKind::Global => (0, false),
        };
        let alloc = if ring { cap * head_dim } else { 0 };
        KvCache {
            kind,
            n_kv,
            head_dim,
            cap,
            ring,
            keys: vec![vec![0.0; alloc]; n_kv],
            values: vec![vec![0.0; alloc]; n_kv],
        }
    }

    /// Write k and v ([n_kv·D] each) of position p.
    pub fn write(&mut self, p: usize, k: &[f32], v: &[f32]) {
        let d = self.head_dim;
        let slot = if self.ring { p % self.cap } else { p };
        for h in 0..self.n_kv {
            if !self.ring && self.keys[h].len() < (slot + 1) * d {
                self.keys[h].resize((slot + 1) * d, 0.0);
                self.values[h].resize((slot + 1) * d, 0.0);
            }
            self.keys[h][slot * d..(slot + 1) * d].copy_from_slice(&k[h * d..(h + 1) * d]);
            self.values[h][slot * d..(slot + 1) * d].copy_from_slice(&v[h * d..(h + 1) * d]);
        }
    }

    /// The cached keys and values of head h for positions `from..=to`, as up to two contiguous
    /// blocks in position order: `(first_position, keys, values)`.
    pub fn blocks(&self, h: usize, from: usize, to: usize) -> Vec<(usize, &[f32], &[f32])> {
        let d = self.head_dim;
        let (k, v) = (&self.keys[h], &self.values[h]);
        if !self.ring {
            return vec![(from, &k[from * d..(to + 1) * d], &v[from * d..(to + 1) * d])];
        }
        let (s0, s1) = (from % self.cap, to % self.cap);
        if s0 <= s1 {
            vec![(from, &k[s0 * d..(s1 + 1) * d], &v[s0 * d..(s1 + 1) * d])]
        } else {
            let first = self.cap - s0;
            vec![
                (from, &k[s0 * d..], &v[s0 * d..]),
                (from + first, &k[..(s1 + 1) * d], &v[..(s1 + 1) * d]),
            ]
        }
    }

    fn truncate(&mut self, pos: usize) {
        if !self.ring {
            for h in 0..self.n_kv {
                self.keys[h].truncate(pos * self.head_dim);
                self.values[h].truncate(pos * self.head_dim);
            }
        }
    }

    /// Hold positions `0..n` filled with values from `rng` (the context probe: every page really
    /// allocated and written), with room to grow to `room` positions without moving: filled
    /// exactly full, a global cache's first decode call past `n` copied every head's keys and
    /// values to grow them (at 512k positions on `inkling` shapes, about 5.4 s more than the next
    /// calls: `results/probe-reserve-20261207-e`). Rings fill their slots for the last positions.
    fn fill_synthetic(&mut self, n: usize, room: usize, rng: &mut crate::rng::Rng) {
        let d = self.head_dim;
        let (len, cap) = if self.ring {
            (self.cap * d, self.cap * d)
        } else {
            (n * d, room.max(n) * d)
        };
        for v in self.keys.iter_mut().chain(self.values.iter_mut()) {
            *v = Vec::new();
            v.reserve_exact(cap);
            v.resize(len, 0.0);
            rng.fill_sym(v, 1.0);
        }
    }

    /// Bytes held by this cache.
    pub fn bytes(&self) -> usize {
        4 * self
            .keys
            .iter()
            .chain(&self.values)
            .map(|v| v.capacity())
            .sum::<usize>()
    }
}

/// State of one layer of one stream.
#[derive(Clone, Debug)]
pub struct LayerState {
    pub kv: KvCache,
    pub conv_k: ConvHistory,
    pub conv_v: ConvHistory,
    pub conv_attn_out: ConvHistory,
    pub conv_mlp_out: ConvHistory,
}

/// State of one stream over a range of layers.
#[derive(Clone, Debug)]
pub struct StreamState {
    /// Positions committed so far (the next row is at `pos`).
    pos: usize,
    /// Longest rewind `truncate` allows.
    slack: usize,
    /// Context budget in positions.
    budget: usize,
    pub layers: Vec<LayerState>,
}

impl StreamState {
    pub fn new(c: &ModelConfig, layers: std::ops::Range<usize>, budget: usize) -> Self {
        let kinds: Vec<AttentionKind> = layers.map(|l| c.attention_kind(l)).collect();
        StreamState::for_kinds(c, &kinds, budget)
    }

    /// A stream over blocks of the given attention kinds (the draft head's modules use this: one
    /// block each, global or sliding by module rather than by layer index).
    pub fn for_kinds(c: &ModelConfig, kinds: &[AttentionKind], budget: usize) -> Self {
        let k = c.conv_kernel;
        let s = c.rewind_slack;
        let layers = kinds
            .iter()
            .map(|&kind| {
                let kvw = c.n_kv_heads(kind) * c.head_dim;
                LayerState {
                    kv: KvCache::new(kind, c.n_kv_heads(kind), c.head_dim, c.window + s),
                    conv_k: ConvHistory::new(kvw, k, s),
                    conv_v: ConvHistory::new(kvw, k, s),
                    conv_attn_out: ConvHistory::new(c.hidden, k, s),
                    conv_mlp_out: ConvHistory::new(c.hidden, k, s),
                }
            })
            .collect();
        StreamState {
            pos: 0,
            slack: s,
            budget,
            layers,
        }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Check that `rows` more positions fit the budget before a forward pass writes them.
    pub fn check_room(&self, rows: usize) -> Result<()> {
        if self.pos + rows > self.budget {
            return Err(Error::State(format!(
                "context budget exceeded: {} positions + {rows} rows > budget {}",
                self.pos, self.budget
            )));
        }
        Ok(())
    }

    /// Mark `rows` positions written by a forward pass as committed.
    pub fn commit(&mut self, rows: usize) {
        self.pos += rows;
    }

    /// Rewind to position `to` (keep positions `0..to`). Rings keep `rewind_slack` positions of
    /// history, so at most that many positions can be undone.
    pub fn truncate(&mut self, to: usize) -> Result<()> {
        if to > self.pos {
            return Err(Error::State(format!(
                "cannot truncate forward: {to} > position {}",
                self.pos
            )));
        }
        if self.pos - to > self.slack {
            return Err(Error::State(format!(
                "rewind of {} positions exceeds the rewind slack {}",
                self.pos - to,
                self.slack
            )));
        }
        for l in &mut self.layers {
            l.kv.truncate(to);
        }
        self.pos = to;
        Ok(())
    }

    /// Forget everything (a new request in this slot).
    pub fn reset(&mut self) {
        for l in &mut self.layers {
            l.kv.truncate(0);
        }
        self.pos = 0;
    }

    /// Pretend `n` positions were processed: every KV cache holds `n` positions of synthetic keys
    /// and values (the context probe). The convolution histories stay as they are.
    pub fn fill_synthetic(&mut self, n: usize, seed: u64) -> Result<()> {
        if n > self.budget {
            return Err(Error::State(format!(
                "cannot fill {n} positions: budget {}",
                self.budget
            )));
        }
        for (i, l) in self.layers.iter_mut().enumerate() {
            let mut rng = crate::rng::Rng::new(crate::rng::mix64(seed ^ (i as u64 + 1)));
            l.kv.fill_synthetic(n, self.budget, &mut rng);
        }
        self.pos = n;
        Ok(())
    }

    /// KV bytes one stream holds at `n` positions over `layers` (f32 keys and values; rings hold
    /// `window + rewind_slack` positions).
    pub fn kv_bytes_at(c: &ModelConfig, layers: std::ops::Range<usize>, n: usize) -> usize {
        layers
            .map(|l| {
                let kind = c.attention_kind(l);
                let held = match kind {
                    AttentionKind::Sliding => c.window + c.rewind_slack,
                    AttentionKind::Global => n,
                };
                2 * 4 * c.n_kv_heads(kind) * c.head_dim * held
            })
            .sum()
    }

    /// Bytes of KV cache held.
    pub fn kv_bytes(&self) -> usize {
        self.layers.iter().map(|l| l.kv.bytes()).sum()
    }
}
