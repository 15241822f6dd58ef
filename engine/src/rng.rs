//! Deterministic counter-based random numbers for synthetic weights and test data.
//!
//! A stream is keyed by `(seed, layer, tensor name, expert)` through SplitMix64 mixing, so any tensor
//! can be generated alone, in any order, on any machine, with the same bits.

/// SplitMix64 finaliser: a bijective 64-bit mix.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over the tensor name, then mixed with the other key parts.
pub fn stream_key(seed: u64, layer: u64, name: &str, expert: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(mix64(mix64(seed ^ mix64(h)) ^ layer.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ expert)
}

/// A SplitMix64 stream.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(key: u64) -> Self {
        Rng { state: key }
    }

    pub fn for_tensor(seed: u64, layer: usize, name: &str, expert: usize) -> Self {
        Rng::new(stream_key(seed, layer as u64, name, expert as u64))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in [−1, 1).
    #[inline]
    pub fn sym(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }

    /// Uniform integer in 0..n.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }

    pub fn fill_sym(&mut self, v: &mut [f32], amp: f32) {
        for x in v {
            *x = amp * self.sym();
        }
    }
}
