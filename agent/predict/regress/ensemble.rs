//! An [`Ensemble`] of independently seeded [`Mlp`]s, whose spread is a cheap
//! uncertainty estimate.

use super::mlp::{Mlp, TrainConfig, TrainReport};
use super::{moments, RegressError};
use serde::{Deserialize, Serialize};

/// K independently seeded MLPs; the spread of their predictions is a cheap
/// uncertainty estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ensemble {
    /// The member networks.
    pub members: Vec<Mlp>,
}

impl Ensemble {
    /// Trains `k` members; member `i` uses seed `cfg.seed + i * 0x9E37_79B9_7F4A_7C15`.
    pub fn train(
        layers: &[usize],
        k: usize,
        x: &[Vec<f64>],
        y: &[f64],
        cfg: &TrainConfig,
    ) -> Result<(Ensemble, Vec<TrainReport>), RegressError> {
        if k == 0 {
            return Err(RegressError::Empty);
        }
        let (mut members, mut reports) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for i in 0..k as u64 {
            let mut c = cfg.clone();
            c.seed = cfg.seed.wrapping_add(crate::support::rng::spread(i));
            let mut mlp = Mlp::new(layers, c.seed);
            reports.push(mlp.train(x, y, &c)?);
            members.push(mlp);
        }
        Ok((Ensemble { members }, reports))
    }

    /// Mean and population standard deviation over members (NaN when empty).
    pub fn predict_mean_std(&self, x: &[f64]) -> (f64, f64) {
        moments(self.members.iter().map(|m| m.predict(x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::regress::tests::{data, map, quick};
    use crate::predict::regress::Loss;

    #[test]
    fn ensemble_uncertainty_grows_off_distribution() {
        let x = data(300, 2, -1.0, 1.0, 10);
        let y = map(&x, |r| r[0] * r[1] + r[0]);
        let (ens, _) = Ensemble::train(&[2, 16, 16, 1], 4, &x, &y, &quick(30, 5e-3)).unwrap();
        let std_at = |p: &[f64]| ens.predict_mean_std(p).1;
        let inside = moments(data(50, 2, -0.8, 0.8, 11).iter().map(|p| std_at(p))).0;
        let corners = [[6.0, 6.0], [-6.0, 6.0], [6.0, -6.0], [-6.0, -6.0]];
        let far = moments(corners.iter().map(|p| std_at(p))).0;
        println!("ensemble std inside {inside:.4} far {far:.4}");
        assert!(far > inside, "far {far} inside {inside}");
        let mut mape = quick(5, 1e-2);
        mape.loss = Loss::Mape;
        let yp: Vec<f64> = y.iter().map(|v| v + 5.0).collect();
        let rep = Mlp::new(&[2, 8, 1], 1).train(&x, &yp, &mape);
        assert!(rep.unwrap().val_loss.unwrap().is_finite());
    }
}
