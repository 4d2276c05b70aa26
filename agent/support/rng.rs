//! The one seeded random-number generator: SplitMix64 (Steele, Lea and Flood, "Fast
//! splittable pseudorandom number generators", OOPSLA 2014). Tiny, deterministic and the
//! same stream on every machine, so every simulated figure, fit and synthetic data set
//! is reproducible from its seed.

/// The golden-ratio increment of the SplitMix64 state.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective, well-mixed 64-bit hash.
pub fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The first output of a generator seeded with `z`: a hash of `z`.
pub fn hash(z: u64) -> u64 {
    mix(z.wrapping_add(GOLDEN))
}

/// Spreads a counter over the state space (`n` times the golden increment), so that
/// consecutive counters seed unrelated streams.
pub fn spread(n: u64) -> u64 {
    n.wrapping_mul(GOLDEN)
}

/// A deterministic, roughly standard-normal number from `seed`: the sum of four uniforms
/// of its stream, centred and scaled to unit variance.
pub fn gaussian(seed: u64) -> f64 {
    let mut rng = SplitMix64::new(seed);
    (0..4).map(|_| rng.unit() - 0.5).sum::<f64>() * 3f64.sqrt()
}

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting from state `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in [0, 1), with 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal deviate (Box-Muller on two uniforms).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (1.0 - self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A uniform index below `n` (`n` > 0; modulo bias is below 2^-40 for any slice).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64() {
        // The reference values of SplitMix64 seeded with 1234567 (the algorithm's
        // published test vector).
        let mut r = SplitMix64::new(1234567);
        let want = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
        assert_eq!(hash(1234567), 6457827717110365317);
    }

    #[test]
    fn gaussian_is_centred_with_unit_variance() {
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| gaussian(spread(i))).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
    }
}
