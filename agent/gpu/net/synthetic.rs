//! The synthetic task the built-in CNN learns: random class templates plus noise,
//! reproducible from a seed and a batch index.

use super::{uniform, CLASSES, PIXELS};
use crate::support::rng::{mix, SplitMix64};

/// Amplitude of the class templates and of the per-pixel noise: separable, but only by
/// combining many pixels (each pixel's noise is twice its template's amplitude).
const TEMPLATE: f32 = 0.4;
const NOISE: f32 = 0.8;

/// A deterministic synthetic classification task: each class is a fixed random 16x16
/// template uniform in ±0.4; a sample is its class's template plus noise uniform in ±0.8.
pub struct Synthetic {
    seed: u64,
    batch: usize,
    templates: Vec<f32>,
}

impl Synthetic {
    /// The task drawn from `seed`, served in batches of `batch`.
    pub fn new(seed: u64, batch: usize) -> Synthetic {
        let mut rng = SplitMix64::new(seed);
        let templates = (0..CLASSES * PIXELS)
            .map(|_| uniform(&mut rng, TEMPLATE))
            .collect();
        Synthetic {
            seed,
            batch,
            templates,
        }
    }

    /// Batch number `index`: images `[batch][1][16][16]` and labels `[batch]`, the same
    /// for the same seed and index.
    pub fn batch(&self, index: u64) -> (Vec<f32>, Vec<i32>) {
        let mut rng = SplitMix64::new(mix(self.seed ^ mix(index.wrapping_add(1))));
        let mut x = Vec::with_capacity(self.batch * PIXELS);
        let labels = (0..self.batch)
            .map(|_| {
                let label = (rng.next_u64() % CLASSES as u64) as usize;
                let template = &self.templates[label * PIXELS..][..PIXELS];
                x.extend(template.iter().map(|&t| t + uniform(&mut rng, NOISE)));
                label as i32
            })
            .collect();
        (x, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_batches_are_reproducible_and_distinct() {
        let data = Synthetic::new(1, 8);
        let (x, y) = data.batch(0);
        assert_eq!((x.len(), y.len()), (8 * PIXELS, 8));
        assert!(y.iter().all(|&l| (0..CLASSES as i32).contains(&l)));
        assert_eq!(data.batch(0), (x.clone(), y));
        assert_ne!(data.batch(1).0, x);
        assert_ne!(Synthetic::new(2, 8).batch(0).0, x);
    }
}
