//! Small deterministic random number generation for the pure core.
//!
//! The simulator, the Gaussian baseline mechanism and the audit's bootstrap all
//! need reproducible randomness from a seed. A hand-written xoshiro256** seeded
//! through SplitMix64 is enough for that, keeps results identical across crate
//! upgrades, and keeps the core free of extra dependencies.

use sha2::{Digest, Sha256};

/// A xoshiro256** generator: fast, small state, good statistical quality.
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

// === impl Rng ===

impl Rng {
    /// Seeds the generator from a 64-bit seed (expanded with SplitMix64).
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let mut state = [0u64; 4];
        for slot in &mut state {
            *slot = splitmix64(&mut sm);
        }
        Rng { state }
    }

    /// Seeds the generator from arbitrary bytes (their SHA-256), e.g. a request body.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let digest = Sha256::digest(bytes);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&digest[..8]);
        Rng::new(u64::from_le_bytes(seed))
    }

    /// Derives an independent generator for a labelled sub-stream.
    pub fn fork(&mut self, label: &str) -> Rng {
        let mut hasher = Sha256::new();
        hasher.update(self.next_u64().to_le_bytes());
        hasher.update(label.as_bytes());
        let digest = hasher.finalize();
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&digest[..8]);
        Rng::new(u64::from_le_bytes(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.state[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.state[1] << 17;
        self.state[2] ^= self.state[0];
        self.state[3] ^= self.state[1];
        self.state[1] ^= self.state[2];
        self.state[0] ^= self.state[3];
        self.state[2] ^= t;
        self.state[3] = self.state[3].rotate_left(45);
        result
    }

    /// A uniform float in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in [0, n); returns 0 when n is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant for simulation use.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Shuffles a slice in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// A seed from the operating system's randomness (for noise a recipient must
/// not be able to predict). This is the only non-deterministic input, used
/// at the edges: the proxy per request, replay when no seed is configured.
pub fn os_seed() -> Result<u64, getrandom::Error> {
    getrandom::u64()
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_different_seeds_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::new(8).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
    }

    #[test]
    fn uniform_and_below_stay_in_range_and_normal_is_centred() {
        let mut r = Rng::from_bytes(b"request body");
        let mut sum = 0.0;
        for _ in 0..20_000 {
            let u = r.uniform();
            assert!((0.0..1.0).contains(&u));
            assert!(r.below(5) < 5);
            sum += r.normal();
        }
        assert!((sum / 20_000.0).abs() < 0.05);
        assert_eq!(r.below(0), 0);
    }
}
