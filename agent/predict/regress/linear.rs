//! Least squares: ridge-regularised [`Linear`] regression (Gaussian elimination on the
//! normal equations), ridge regression with its penalty chosen by leave-one-out
//! ([`ridge_loo`], in the dual or the primal, whichever is smaller, with the inverse of a
//! symmetric positive definite matrix, [`spd_inverse`]), and the least-squares slope of one variable on another.

use super::{moments, usable_rows, RegressError};
use serde::{Deserialize, Serialize};

/// Least squares with a ridge term; the intercept is not penalised:
/// `(Xc'Xc/n + ridge I) w = Xc'yc/n` on centred data, `b = ȳ - w·x̄`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    /// Weights, one per input.
    pub w: Vec<f64>,
    /// Intercept.
    pub b: f64,
}

impl Linear {
    /// Fits `y` on `x` with penalty `ridge`, skipping rows that are not finite.
    pub fn fit(x: &[Vec<f64>], y: &[f64], ridge: f64) -> Result<Linear, RegressError> {
        let d = x.first().map_or(0, Vec::len);
        let idx = usable_rows(x, Some(y), d)?;
        let n = idx.len() as f64;
        let mx: Vec<f64> = (0..d)
            .map(|k| moments(idx.iter().map(|&i| x[i][k])).0)
            .collect();
        let my = moments(idx.iter().map(|&i| y[i])).0;
        let w1 = d + 1;
        let (mut a, mut xc) = (vec![0.0; d * w1], vec![0.0; d]);
        for &i in &idx {
            for k in 0..d {
                xc[k] = x[i][k] - mx[k];
            }
            for r in 0..d {
                for c in 0..d {
                    a[r * w1 + c] += xc[r] * xc[c] / n;
                }
                a[r * w1 + d] += xc[r] * (y[i] - my) / n;
            }
        }
        for r in 0..d {
            a[r * w1 + r] += ridge.max(0.0);
        }
        let w = solve(&mut a, d)?;
        let b = my - w.iter().zip(&mx).map(|(w, m)| w * m).sum::<f64>();
        Ok(Linear { w, b })
    }

    /// NaN when `x` has the wrong length.
    #[inline(always)]
    pub fn predict(&self, x: &[f64]) -> f64 {
        if x.len() != self.w.len() {
            return f64::NAN;
        }
        // Four partial sums, so the compiler keeps them in vector lanes: this runs once per
        // mode and ensemble member when a model predicts a board's whole mode space.
        let mut acc = [0.0; 4];
        let (wc, xc) = (self.w.chunks_exact(4), x.chunks_exact(4));
        let tail: f64 = wc
            .remainder()
            .iter()
            .zip(xc.remainder())
            .map(|(w, v)| w * v)
            .sum();
        for (w4, x4) in wc.zip(xc) {
            for k in 0..4 {
                acc[k] += w4[k] * x4[k];
            }
        }
        self.b + (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
    }
}

/// Ridge regression with its penalty chosen by leave-one-out cross-validation: for each
/// of `lambdas`, `min |r - b - Z w|^2 + lambda n |w|^2` on columns standardised over the
/// rows (constant columns get no weight), and the exact leave-one-out residuals of that
/// fit; the penalty with the least leave-one-out squared error wins. Solved in the dual
/// (`n x n`, Cholesky) with no more rows than columns, else in the primal (`p x p`).
/// Returns the fit on the original columns, the chosen penalty and its leave-one-out
/// residuals.
pub fn ridge_loo(z: &[Vec<f64>], r: &[f64], lambdas: &[f64]) -> Result<RidgeLoo, RegressError> {
    let p = z.first().map_or(0, Vec::len);
    let idx = usable_rows(z, Some(r), p)?;
    let n = idx.len();
    if n < 3 || lambdas.is_empty() {
        return Err(RegressError::Empty);
    }
    let stats: Vec<(f64, f64)> = (0..p)
        .map(|k| moments(idx.iter().map(|&i| z[i][k])))
        .collect();
    let zs: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let row = z[i].iter().zip(&stats);
            row.map(|(v, &(m, s))| if s > 1e-12 { (v - m) / s } else { 0.0 })
                .collect()
        })
        .collect();
    let rm = moments(idx.iter().map(|&i| r[i])).0;
    let rc: Vec<f64> = idx.iter().map(|&i| r[i] - rm).collect();
    let nf = n as f64;
    // Each penalty's standardised weights and leave-one-out residuals, solved in the
    // smaller form: the dual (n x n) with no more rows than columns, else the primal (p x
    // p), which gives the same fit (a profile of thousands of modes made the dual cubic in
    // them: a review measured minutes for 1,000).
    let dual = n <= p;
    let square = |rows: usize, at: &dyn Fn(usize, usize) -> f64| {
        let mut m = vec![0.0; rows * rows];
        for a in 0..rows {
            for b in 0..=a {
                let k = at(a, b);
                (m[a * rows + b], m[b * rows + a]) = (k, k);
            }
        }
        m
    };
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
    let gram = if dual {
        square(n, &|a, b| dot(&zs[a], &zs[b]))
    } else {
        square(p, &|a, b| zs.iter().map(|row| row[a] * row[b]).sum())
    };
    let zr: Vec<f64> = (0..p)
        .map(|k| zs.iter().zip(&rc).map(|(row, r)| row[k] * r).sum())
        .collect();
    let mut best: Option<(f64, f64, Vec<f64>, Vec<f64>)> = None;
    for &lambda in lambdas {
        let ln = lambda.max(1e-12) * nf;
        let size = if dual { n } else { p };
        let mut a = gram.clone();
        (0..size).for_each(|i| a[i * size + i] += ln);
        let inv = spd_inverse(&mut a, size)?;
        let row = |i: usize| &inv[i * size..(i + 1) * size];
        let (ws, residuals): (Vec<f64>, Vec<f64>) = if dual {
            let alpha: Vec<f64> = (0..n).map(|i| dot(row(i), &rc)).collect();
            // Residual ln * alpha_i; 1 - H_ii = ln * inv_ii, less the intercept's leverage 1/n.
            let residuals = (0..n)
                .map(|i| {
                    let lev = (ln * inv[i * n + i] - 1.0 / nf).max(1e-9);
                    ln * alpha[i] / lev
                })
                .collect();
            let ws = (0..p)
                .map(|k| zs.iter().zip(&alpha).map(|(row, a)| row[k] * a).sum())
                .collect();
            (ws, residuals)
        } else {
            let ws: Vec<f64> = (0..p).map(|k| dot(row(k), &zr)).collect();
            // Residual r_i - z_i w; 1 - H_ii = 1 - z_i A^-1 z_i, less 1/n as above.
            let residuals = zs
                .iter()
                .zip(&rc)
                .map(|(z, r)| {
                    let h: f64 = (0..p).map(|k| z[k] * dot(row(k), z)).sum();
                    let lev = (1.0 - h - 1.0 / nf).max(1e-9);
                    (r - dot(z, &ws)) / lev
                })
                .collect();
            (ws, residuals)
        };
        let loo = residuals.iter().map(|e| e * e).sum::<f64>();
        if best.as_ref().is_none_or(|b| loo < b.0) {
            best = Some((loo, lambda, ws, residuals));
        }
    }
    let (_, lambda, ws, residuals) = best.ok_or(RegressError::Empty)?;
    // Each row's residual in the caller's order (NaN for a row that was not usable).
    let mut loo = vec![f64::NAN; z.len()];
    for (&i, e) in idx.iter().zip(residuals) {
        loo[i] = e;
    }
    let w: Vec<f64> = (0..p)
        .map(|k| {
            let (_, s) = stats[k];
            if s > 1e-12 {
                ws[k] / s
            } else {
                0.0
            }
        })
        .collect();
    let b = rm - w.iter().zip(&stats).map(|(w, (m, _))| w * m).sum::<f64>();
    Ok(RidgeLoo {
        fit: Linear { w, b },
        lambda,
        loo,
    })
}

/// What [`ridge_loo`] chose.
#[derive(Debug, Clone, PartialEq)]
pub struct RidgeLoo {
    /// The fit on the original columns.
    pub fit: Linear,
    /// The penalty leave-one-out chose.
    pub lambda: f64,
    /// Each row's exact leave-one-out residual at that penalty (measured less predicted
    /// by the fit without the row; NaN for a row with a non-finite value).
    pub loo: Vec<f64>,
}

impl RidgeLoo {
    /// The root mean square of the leave-one-out residuals.
    #[cfg(test)]
    pub fn loo_rmse(&self) -> f64 {
        let finite: Vec<f64> = self.loo.iter().copied().filter(|e| e.is_finite()).collect();
        (finite.iter().map(|e| e * e).sum::<f64>() / finite.len().max(1) as f64).sqrt()
    }
}

/// The inverse of the symmetric positive definite `n x n` matrix `a` (overwritten by its
/// Cholesky factor).
pub(crate) fn spd_inverse(a: &mut [f64], n: usize) -> Result<Vec<f64>, RegressError> {
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| a[j * n + k].powi(2)).sum::<f64>();
        if !(d > 0.0 && d.is_finite()) {
            return Err(RegressError::Singular);
        }
        a[j * n + j] = d.sqrt();
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| a[i * n + k] * a[j * n + k]).sum::<f64>();
            a[i * n + j] = s / a[j * n + j];
        }
    }
    // Columns of L^-T L^-1 = a^-1, by forward then back substitution of each unit vector.
    let mut inv = vec![0.0; n * n];
    let mut col = vec![0.0; n];
    for c in 0..n {
        for i in 0..n {
            let e = if i == c { 1.0 } else { 0.0 };
            col[i] = (e - (0..i).map(|k| a[i * n + k] * col[k]).sum::<f64>()) / a[i * n + i];
        }
        for i in (0..n).rev() {
            col[i] =
                (col[i] - (i + 1..n).map(|k| a[k * n + i] * col[k]).sum::<f64>()) / a[i * n + i];
        }
        (0..n).for_each(|i| inv[i * n + c] = col[i]);
    }
    Ok(inv)
}

/// Gaussian elimination with partial pivoting on a `d x (d+1)` augmented matrix.
fn solve(a: &mut [f64], d: usize) -> Result<Vec<f64>, RegressError> {
    let w1 = d + 1;
    let scale = (0..d)
        .map(|i| a[i * w1 + i].abs())
        .fold(f64::MIN_POSITIVE, f64::max);
    for col in 0..d {
        let key = |r: usize| a[r * w1 + col].abs();
        let piv = (col..d)
            .max_by(|&p, &q| key(p).total_cmp(&key(q)))
            .unwrap_or(col);
        let pv = a[piv * w1 + col];
        if !(pv.abs() > scale * 1e-14 && pv.is_finite()) {
            return Err(RegressError::Singular);
        }
        for c in 0..w1 {
            a.swap(piv * w1 + c, col * w1 + c);
        }
        for r in col + 1..d {
            let f = a[r * w1 + col] / pv;
            for c in col..w1 {
                a[r * w1 + c] -= f * a[col * w1 + c];
            }
        }
    }
    let mut w = vec![0.0; d];
    for r in (0..d).rev() {
        let s = a[r * w1 + d] - (r + 1..d).map(|c| a[r * w1 + c] * w[c]).sum::<f64>();
        w[r] = s / a[r * w1 + r];
    }
    Ok(w)
}

/// The least-squares slope of `y` on `x` (with an intercept); 0 where `x` is constant.
pub(super) fn slope(x: &[f64], y: &[f64]) -> f64 {
    let (mx, my) = (moments(x.iter().copied()).0, moments(y.iter().copied()).0);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let var: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    if var > 1e-300 {
        cov / var
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::regress::tests::{data, map};
    use crate::predict::regress::{rng, shape};

    #[test]
    fn linear_recovers_coefficients() {
        let mut x = data(200, 3, -5.0, 5.0, 1);
        let mut y = map(&x, |r| 1.5 * r[0] - 2.0 * r[1] + 0.25 * r[2] + 3.0);
        x.push(vec![f64::NAN, 0.0, 0.0]);
        y.push(1.0);
        let lin = Linear::fit(&x, &y, 0.0).unwrap();
        for (w, e) in lin.w.iter().zip([1.5, -2.0, 0.25]) {
            assert!((w - e).abs() < 1e-9, "{w} vs {e}");
        }
        assert!((lin.b - 3.0).abs() < 1e-9);
        assert!((lin.predict(&[1.0, 1.0, 1.0]) - 2.75).abs() < 1e-9);
        assert!(lin.predict(&[1.0]).is_nan());
        assert_eq!(Linear::fit(&[], &[], 0.0), Err(RegressError::Empty));
        let ragged = [vec![1.0], vec![1.0, 2.0]];
        assert_eq!(Linear::fit(&ragged, &[1.0, 2.0], 0.0), Err(shape(1, 2)));
        let same = [vec![1.0], vec![1.0]];
        let singular = Linear::fit(&same, &[1.0, 2.0], 0.0);
        assert_eq!(singular, Err(RegressError::Singular));
        assert!(Linear::fit(&same, &[1.0, 2.0], 1e-6).is_ok());
    }

    /// The primal form (more rows than columns) gives the dual's fit: the same rows with
    /// constant columns added, which get no weight, are solved in the dual.
    #[test]
    fn ridge_loo_primal_and_dual_agree() {
        let x = data(30, 5, -1.0, 1.0, 31);
        let mut rng = rng(32);
        let y: Vec<f64> = x
            .iter()
            .map(|r| r[0] - 2.0 * r[2] + 0.3 * rng.normal())
            .collect();
        let wide: Vec<Vec<f64>> = x
            .iter()
            .map(|r| [r.clone(), vec![1.0; 30]].concat())
            .collect();
        let lambdas = [1e-4, 1e-2, 1.0];
        let (primal, dual) = (
            ridge_loo(&x, &y, &lambdas).unwrap(),
            ridge_loo(&wide, &y, &lambdas).unwrap(),
        );
        assert_eq!(primal.lambda, dual.lambda);
        assert!((primal.fit.b - dual.fit.b).abs() < 1e-9);
        for (a, b) in primal.fit.w.iter().zip(&dual.fit.w) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
        for (a, b) in primal.loo.iter().zip(&dual.loo) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }

    #[test]
    fn ridge_loo_recovers_coefficients_and_shrinks_noise() {
        let x = data(60, 10, -1.0, 1.0, 21);
        let y = map(&x, |r| 2.0 * r[0] - r[3] + 0.5);
        let got = ridge_loo(&x, &y, &[1e-6, 1e-3, 1.0, 100.0]).unwrap();
        let (fit, lambda, loo_rmse) = (got.fit.clone(), got.lambda, got.loo_rmse());
        assert_eq!(lambda, 1e-6);
        assert!(loo_rmse < 1e-3, "an exact linear target: {loo_rmse}");
        for r in &data(50, 10, -1.0, 1.0, 22) {
            let (got, want) = (fit.predict(r), 2.0 * r[0] - r[3] + 0.5);
            assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        }
        // Pure noise on more columns than rows (the dual form still solves): leave-one-out
        // prefers the strongest penalty, a near-constant fit.
        let x = data(30, 40, -1.0, 1.0, 23);
        let mut rng = rng(24);
        let noise: Vec<f64> = (0..30).map(|_| rng.normal()).collect();
        let got = ridge_loo(&x, &noise, &[1e-6, 1e-3, 1.0, 100.0]).unwrap();
        let (fit, lambda, loo_rmse) = (got.fit.clone(), got.lambda, got.loo_rmse());
        assert_eq!(lambda, 100.0);
        // Predicting unit noise out of sample misses by about its deviation, row by row.
        assert!((0.7..1.5).contains(&loo_rmse), "{loo_rmse}");
        assert_eq!(got.loo.len(), 30);
        assert!(fit.w.iter().all(|w| w.abs() < 0.05), "{:?}", fit.w);
        assert_eq!(
            ridge_loo(&x[..2], &noise[..2], &[1.0]),
            Err(RegressError::Empty)
        );
        assert_eq!(ridge_loo(&x, &noise, &[]), Err(RegressError::Empty));
    }

    #[test]
    fn spd_inverse_inverts() {
        let m = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0];
        let inv = spd_inverse(&mut m.clone(), 3).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                let v: f64 = (0..3).map(|k| m[i * 3 + k] * inv[k * 3 + j]).sum();
                assert!(
                    (v - f64::from(u8::from(i == j))).abs() < 1e-12,
                    "{i} {j} {v}"
                );
            }
        }
        let singular = spd_inverse(&mut [1.0, 1.0, 1.0, 1.0], 2);
        assert_eq!(singular, Err(RegressError::Singular));
    }
}
