//! Per-feature z-scoring of the regressors' inputs ([`Standardizer`]).

use super::{moments, usable_rows, RegressError};
use serde::{Deserialize, Serialize};

/// Per-feature z-scoring. Constant features get `std = 1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    /// Each feature's mean.
    pub mean: Vec<f64>,
    /// Each feature's standard deviation (1 for a constant feature).
    pub std: Vec<f64>,
}

impl Standardizer {
    /// Fits mean/std over the finite rows of `x`.
    pub fn fit(x: &[Vec<f64>]) -> Result<Standardizer, RegressError> {
        let d = x.first().map_or(0, Vec::len);
        let idx = usable_rows(x, None, d)?;
        let (mean, std) = (0..d)
            .map(|k| moments(idx.iter().map(|&i| x[i][k])))
            .map(|(m, s)| (m, if s > 1e-12 { s } else { 1.0 }))
            .unzip();
        Ok(Standardizer { mean, std })
    }

    /// Standardises `x`; entries past `x.len()` are NaN.
    pub fn apply(&self, x: &[f64]) -> Vec<f64> {
        let mut out = vec![f64::NAN; self.mean.len()];
        self.apply_into(x, &mut out);
        out
    }

    /// Allocation-free: writes the first `min(x, out, dim)` standardised values.
    pub fn apply_into(&self, x: &[f64], out: &mut [f64]) {
        for ((o, v), (m, s)) in out.iter_mut().zip(x).zip(self.mean.iter().zip(&self.std)) {
            *o = (v - m) / s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::regress::tests::quick;
    use crate::predict::regress::Mlp;

    #[test]
    fn standardizer_and_errors() {
        let x = vec![vec![1.0, 5.0], vec![3.0, 5.0], vec![f64::INFINITY, 0.0]];
        let s = Standardizer::fit(&x).unwrap();
        assert_eq!(s.mean, vec![2.0, 5.0]);
        assert_eq!(s.std, vec![1.0, 1.0]);
        assert_eq!(s.apply(&[3.0, 6.0]), vec![1.0, 1.0]);
        assert!(s.apply(&[3.0])[1].is_nan());
        assert_eq!(Standardizer::fit(&[]), Err(RegressError::Empty));
        let mut m = Mlp::new(&[2, 4, 1], 0);
        let nan = m.train(&[vec![f64::NAN, 1.0]], &[1.0], &quick(1, 1e-3));
        assert_eq!(nan, Err(RegressError::Empty));
        assert!(m.predict(&[1.0]).is_nan());
        let none = Mlp::new(&[3], 0).train(&[vec![1.0]], &[1.0], &quick(1, 1e-3));
        assert_eq!(none, Err(RegressError::Empty));
        assert_eq!(RegressError::Empty.to_string(), "no usable training rows");
    }
}
