//! An [`Ensemble`] of independently seeded [`Mlp`]s, whose spread is a cheap
//! uncertainty estimate.

use super::mlp::{Mlp, TrainConfig, TrainReport};
use super::RegressError;
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
    /// The members share nothing, so they train on as many threads as there are cores
    /// (at most `k`), each member exactly as it would alone: the ensemble does not depend
    /// on the number of threads.
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
        let member = |i: usize| {
            let mut c = cfg.clone();
            c.seed = cfg.seed.wrapping_add(crate::support::rng::spread(i as u64));
            let mut mlp = Mlp::new(layers, c.seed);
            mlp.train(x, y, &c).map(|report| (mlp, report))
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(k));
        let next = std::sync::atomic::AtomicUsize::new(0);
        type Trained = Result<(Mlp, TrainReport), RegressError>;
        let mut done: Vec<(usize, Trained)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            // Relaxed: the counter only hands out indices; the results
                            // travel back through `join`.
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if i >= k {
                                return mine;
                            }
                            mine.push((i, member(i)));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().expect("an ensemble member's thread"))
                .collect()
        });
        done.sort_by_key(|d| d.0);
        let (members, reports) = done
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        Ok((Ensemble { members }, reports))
    }

    /// Mean and population standard deviation over members (NaN when empty).
    #[cfg(test)]
    pub fn predict_mean_std(&self, x: &[f64]) -> (f64, f64) {
        super::moments(self.members.iter().map(|m| m.predict(x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::regress::moments;
    use crate::predict::regress::tests::{data, map, quick};
    use crate::predict::regress::Loss;

    #[test]
    fn members_trained_on_threads_are_those_trained_alone() {
        let x = data(200, 3, -1.0, 1.0, 12);
        let y = map(&x, |r| r[0] * r[1] - r[2]);
        let cfg = quick(5, 5e-3);
        let (ens, reports) = Ensemble::train(&[3, 8, 4, 1], 5, &x, &y, &cfg).unwrap();
        assert_eq!((ens.members.len(), reports.len()), (5, 5));
        for (i, (m, r)) in ens.members.iter().zip(&reports).enumerate() {
            let mut c = cfg.clone();
            c.seed = cfg.seed.wrapping_add(crate::support::rng::spread(i as u64));
            let mut alone = Mlp::new(&[3, 8, 4, 1], c.seed);
            assert_eq!(alone.train(&x, &y, &c).as_ref(), Ok(r), "member {i}");
            assert_eq!(&alone, m, "member {i}");
        }
    }

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
