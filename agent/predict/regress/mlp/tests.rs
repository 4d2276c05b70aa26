//! The network on data of known form: fits, transfers, batch predictions equal to the
//! scalar ones, and files that round-trip.

use super::train::Scratch;
use super::*;
use crate::predict::regress::tests::{data, f, map, quick, rmse, round_trip};
use crate::predict::regress::Standardizer;

#[test]
fn refit_output_transfers_a_shift_and_an_input_trend() {
    let xs = data(1500, 3, -1.5, 1.5, 24);
    let mut base = Mlp::new(&[3, 32, 16, 1], 25);
    base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
    // The target differs by a level and a trend in an input the reference's hidden
    // layer need not represent linearly; 20 rows suffice to fit it.
    let g = |x: &[f64]| f(x) + 0.7 * x[2] - 0.4;
    let (few, test) = (data(20, 3, -1.5, 1.5, 26), data(500, 3, -1.5, 1.5, 27));
    let mut tl = base.clone();
    tl.refit_output(&few, &map(&few, g), &[1e-3, 1e-2, 0.1, 1.0], None)
        .unwrap();
    let (e_tl, e_base) = (rmse(&tl, &test, g), rmse(&base, &test, g));
    println!("refit RMSE {e_tl:.4} vs untransferred {e_base:.4}");
    assert!(e_tl < 0.3 * e_base, "refit {e_tl} base {e_base}");
    // The skip term is part of predictions (batch and single row alike) and of the
    // saved model; training drops it.
    let flat: Vec<f64> = test.iter().flatten().copied().collect();
    let mut out = vec![0.0; test.len()];
    tl.predict_batch(&flat, 3, &mut out);
    assert!((out[7] - tl.predict(&test[7])).abs() < 1e-12);
    assert!(tl.skip.is_some());
    round_trip(&tl);
    tl.train(&few, &map(&few, g), &quick(1, 1e-3)).unwrap();
    assert!(tl.skip.is_none());
    assert_eq!(
        Mlp::new(&[3, 4, 1], 0).refit_output(&few, &map(&few, g), &[1.0], None),
        Err(RegressError::Empty),
        "an unfitted network has no output to correct"
    );
}

#[test]
fn refit_output_reads_extra_columns_past_the_networks_inputs() {
    let xs = data(1500, 3, -1.5, 1.5, 24);
    let mut base = Mlp::new(&[3, 32, 16, 1], 25);
    base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
    // The target also depends on a fourth column the network never reads.
    let g = |x: &[f64]| f(x) + 0.9 * x[3];
    let (few, test) = (data(30, 4, -1.5, 1.5, 28), data(500, 4, -1.5, 1.5, 29));
    let mut tl = base.clone();
    tl.refit_output(&few, &map(&few, g), &[1e-4, 1e-3, 1e-2, 0.1], None)
        .unwrap();
    assert_eq!(tl.skip.as_ref().map(|s| s.w.len()), Some(4));
    let w = tl.skip.as_ref().unwrap().w[3];
    assert!((w - 0.9).abs() < 0.1, "the extra column's weight {w}");
    let e = rmse(&tl, &test, g);
    assert!(e < 0.15, "refit RMSE with the extra column {e}");
    // Rows as wide as the read-out, else NaN; the network alone reads 3 columns.
    let flat: Vec<f64> = test.iter().flatten().copied().collect();
    let mut out = vec![0.0; test.len()];
    tl.predict_batch(&flat, 4, &mut out);
    assert!((out[3] - tl.predict(&test[3])).abs() < 1e-12);
    assert!(tl.predict(&test[3][..3]).is_nan());
    assert!(base.predict(&test[3][..3]).is_finite());
}

#[test]
fn refit_output_follows_an_anchor_where_the_network_cannot() {
    let xs = data(1500, 3, -1.5, 1.5, 24);
    let mut base = Mlp::new(&[3, 32, 16, 1], 25);
    base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
    // The target is another function entirely; the anchor column (4th) predicts it
    // with a small error of its own.
    let g = |x: &[f64]| (2.0 * x[0]).sin() * x[1] - x[2] * x[2];
    let anchored = |xs: &[Vec<f64>]| -> Vec<Vec<f64>> {
        xs.iter()
            .map(|x| [&x[..3], &[g(x) + 0.05 * x[0]]].concat())
            .collect()
    };
    let (few, test) = (
        anchored(&data(20, 3, -1.5, 1.5, 30)),
        anchored(&data(500, 3, -1.5, 1.5, 31)),
    );
    let lambdas = [1e-3, 1e-2, 0.1, 1.0, 10.0];
    let knobs = |xs: &[Vec<f64>]| -> Vec<Vec<f64>> { xs.iter().map(|x| x[..3].to_vec()).collect() };
    let mut plain = base.clone();
    plain
        .refit_output(&knobs(&few), &map(&few, g), &lambdas, None)
        .unwrap();
    let mut tl = base.clone();
    tl.refit_output(&few, &map(&few, g), &lambdas, Some(3))
        .unwrap();
    let e_plain = rmse(&plain, &knobs(&test), g);
    let e_anchor = rmse(&tl, &test, g);
    println!("anchored RMSE {e_anchor:.4} vs the network alone {e_plain:.4}");
    assert!(
        e_anchor < 0.1 && e_anchor < 0.3 * e_plain,
        "{e_anchor} {e_plain}"
    );
    let u = tl.skip.as_ref().unwrap().w[3];
    assert!((u - 1.0).abs() < 0.1, "the anchor's weight {u}");
    // The blend is folded in: batch and single-row predictions read the column as is.
    let flat: Vec<f64> = test.iter().flatten().copied().collect();
    let mut out = vec![0.0; test.len()];
    tl.predict_batch(&flat, 4, &mut out);
    assert!((out[9] - tl.predict(&test[9])).abs() < 1e-12);
    // The anchor must be one of the extra columns.
    let mut bad = base.clone();
    assert!(bad
        .refit_output(&few, &map(&few, g), &lambdas, Some(1))
        .is_err());
    assert!(bad
        .refit_output(&few, &map(&few, g), &lambdas, Some(4))
        .is_err());
    assert_eq!(bad, base, "a refused refit changes nothing");
}

#[test]
fn mlp_fits_product_plus_sine() {
    let mut x = data(2000, 3, -2.0, 2.0, 2);
    let mut y = map(&x, f);
    x.push(vec![0.0, f64::NAN, 0.0]);
    y.push(0.0);
    let st = Standardizer::fit(&x).unwrap();
    let xs: Vec<Vec<f64>> = x.iter().map(|r| st.apply(r)).collect();
    let mut m = Mlp::new(&[3, 32, 16, 1], 7);
    let rep = m.train(&xs, &y, &quick(30, 5e-3)).unwrap();
    assert_eq!(rep.skipped, 1);
    let test = data(500, 3, -2.0, 2.0, 3);
    let err = |r: &Vec<f64>| (m.predict(&st.apply(r)) - f(r)).powi(2);
    let se = moments(test.iter().map(err)).0;
    let r2 = 1.0 - se / moments(test.iter().map(|r| f(r))).1.powi(2);
    println!("R^2 = {r2:.4}, report {rep:?}");
    assert!(r2 > 0.95, "R^2 {r2}");
}

#[test]
fn transfer_beats_scratch_on_50_samples() {
    let g = |x: &[f64]| 1.3 * f(x) + 0.2;
    let xs = data(1500, 3, -1.5, 1.5, 4);
    let mut base = Mlp::new(&[3, 32, 16, 1], 11);
    base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
    let (few, test) = (data(50, 3, -1.5, 1.5, 5), data(500, 3, -1.5, 1.5, 6));
    let gy = map(&few, g);
    let mut cfg = quick(300, 1e-2);
    cfg.val_fraction = 0.0;
    let mut scratch = Mlp::new(&[3, 32, 16, 1], 12);
    scratch.train(&few, &gy, &cfg).unwrap();
    let (mut tl, mut fine) = (base.transfer(true, 99), cfg.clone());
    fine.freeze = 2; // new output layer on the frozen pre-trained features
    tl.train(&few, &gy, &fine).unwrap();
    let (e_tl, e_sc) = (rmse(&tl, &test, g), rmse(&scratch, &test, g));
    println!("transfer RMSE {e_tl:.4} vs scratch {e_sc:.4}");
    assert!(e_tl < e_sc, "transfer {e_tl} scratch {e_sc}");
    // Refitting target statistics without reinit keeps the predictions.
    let mut keep = base.transfer(false, 0);
    let before = keep.predict(&test[0]);
    cfg.epochs = 0;
    keep.train(&few, &gy, &cfg).unwrap();
    // Predictions run the network in f32: equal to its precision.
    assert!((keep.predict(&test[0]) - before).abs() < 1e-5 * before.abs().max(1.0));
}

#[test]
fn backprop_matches_finite_differences() {
    for dropout in [vec![], vec![0.4, 0.3]] {
        let m = Mlp::new(&[3, 8, 6, 4, 1], 5);
        let cfg = TrainConfig {
            dropout,
            ..quick(1, 1e-3)
        };
        let loss_and_grad = |m: &Mlp| {
            let mut g: Vec<Layer> = m.layers.iter().map(Layer::zeros_like).collect();
            let (mut sc, mut rng) = (Scratch::new(&m.layers), rng(42));
            let loss = m.backprop(&[0.3, -0.7, 1.1], 0.9, &cfg, &mut rng, &mut sc, &mut g);
            (loss, g)
        };
        let (g, mut nonzero) = (loss_and_grad(&m).1, 0);
        for (l, k) in (0..4).flat_map(|l| (0..m.layers[l].w.len()).map(move |k| (l, k))) {
            let (mut a, mut b) = (m.clone(), m.clone());
            a.layers[l].w[k] += 1e-6;
            b.layers[l].w[k] -= 1e-6;
            let fd = (loss_and_grad(&a).0 - loss_and_grad(&b).0) / 2e-6;
            assert!((fd - g[l].w[k]).abs() < 1e-6, "w[{l}][{k}] {fd}");
            nonzero += (fd != 0.0) as usize;
        }
        assert!(nonzero > 10, "{nonzero}");
    }
}

#[test]
fn a_first_layer_split_over_a_lattice_predicts_as_the_whole_network() {
    // Six inputs: two read the first part of a row's lattice point, two the second,
    // two both; 7 x 5 points, each row once, over two blocks.
    let mut nets = vec![Mlp::new(&[6, 16, 8, 1], 1), Mlp::new(&[6, 8, 1], 2)];
    for m in &mut nets {
        (m.y_mean, m.y_std) = (1.5, 0.5);
        m.fitted = true;
    }
    let part = [Some(0), None, Some(1), Some(0), Some(1), None];
    let row = |i: usize, j: usize| {
        let (u, v) = (i as f64 * 0.3 - 1.0, j as f64 * 0.45 - 0.9);
        [u, (u - v).max(0.0), v, u * u, v.sin(), u * v]
    };
    let (pi, pj) = (7, 5);
    let at: Vec<[usize; 2]> = (0..pi * pj).map(|k| [k % pi, k / pi]).collect();
    let xs: Vec<f64> = at.iter().flat_map(|&[i, j]| row(i, j)).collect();
    let grid0: Vec<f64> = (0..pi).flat_map(|i| row(i, 0)).collect();
    let grid1: Vec<f64> = (0..pj).flat_map(|j| row(0, j)).collect();
    let mut batch = Batch::new(&nets, 6, 20).with_tables(&part, &part, [&grid0, &grid1]);
    let (mut split, mut whole) = (vec![vec![0.0; at.len()]; 2], vec![0.0; at.len()]);
    for (b, (xb, ab)) in xs.chunks(20 * 6).zip(at.chunks(20)).enumerate() {
        let [s0, s1] = &mut split[..] else {
            unreachable!()
        };
        let views = &mut [&mut s0[b * 20..][..ab.len()], &mut s1[b * 20..][..ab.len()]];
        batch.predict(xb, ab, views);
    }
    for (k, m) in nets.iter().enumerate() {
        m.predict_batch(&xs, 6, &mut whole);
        for (s, w) in split[k].iter().zip(&whole) {
            assert!((s - w).abs() <= 1e-6 * w.abs(), "net {k}: {s} vs {w}");
        }
    }
    // Without grid points, or with a point off its grid, the networks run whole.
    let mut out = vec![vec![0.0; 20]; 2];
    let [o0, o1] = &mut out[..] else {
        unreachable!()
    };
    batch.predict(&xs[..120], &[], &mut [&mut o0[..], &mut o1[..]]);
    nets[1].predict_batch(&xs[..120], 6, &mut whole[..20]);
    assert_eq!(out[1], whole[..20]);
    let off: Vec<[usize; 2]> = at[..20].iter().map(|&[i, _]| [i, pj]).collect();
    let [o0, o1] = &mut out[..] else {
        unreachable!()
    };
    batch.predict(&xs[..120], &off, &mut [&mut o0[..], &mut o1[..]]);
    assert_eq!(out[1], whole[..20]);
}

#[test]
fn a_network_rounded_to_f32_is_saved_in_f32_and_predicts_the_same() {
    let xs = data(200, 3, -1.5, 1.5, 40);
    let mut m = Mlp::new(&[3, 16, 8, 1], 41);
    m.train(&xs, &map(&xs, f), &quick(3, 5e-3)).unwrap();
    let mut r = m.clone();
    r.round_to_f32();
    let (wide, narrow) = (serde_json::to_string(&m), serde_json::to_string(&r));
    let (wide, narrow) = (wide.unwrap(), narrow.unwrap());
    assert!(narrow.contains("\"f32\":true") && !wide.contains("f32"));
    assert!(
        narrow.len() * 10 < wide.len() * 6,
        "{} vs {}",
        narrow.len(),
        wide.len()
    );
    round_trip(&r);
    round_trip(&m);
    for x in &xs {
        assert_eq!(r.predict(x), m.predict(x));
    }
    // Any f32, from the least subnormal up, reads back from its shortest text.
    let mut g = rng(42);
    let w: Vec<f64> = (0..100_000)
        .map(|_| f64::from(f32::from_bits(g.next_u64() as u32)))
        .filter(|v| v.is_finite())
        .chain([f64::from(f32::from_bits(1)), f64::from(f32::MAX)])
        .collect();
    let (n_in, n_out) = (1, w.len());
    round_trip(&Layer {
        n_in,
        n_out,
        w,
        b: vec![0.0; n_out],
    });
}

#[test]
fn predict_batch_matches_predict_and_timing() {
    let mut m = Mlp::new(&powertrain_layers(4), 3);
    (m.y_mean, m.y_std) = (2.5, 0.7);
    let n = if cfg!(debug_assertions) { 1000 } else { 18_096 };
    let rows = data(n, 4, -2.0, 2.0, 8);
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let mut out = vec![0.0; n];
    for pass in ["cold", "warm"] {
        let t0 = std::time::Instant::now();
        m.predict_batch(&flat, 4, &mut out);
        println!(
            "predict_batch ({pass}): {n} rows 4-256-128-64-1 in {:?}",
            t0.elapsed()
        );
    }
    for (r, o) in rows.iter().zip(&out).take(1000) {
        assert!((m.predict(r) - o).abs() < 1e-12);
    }
    let mut short = vec![0.0; 3];
    m.predict_batch(&flat[..9], 4, &mut short);
    assert!(short[0].is_finite() && short[1].is_finite() && short[2].is_nan());
    m.predict_batch(&flat, 3, &mut short);
    assert!(short.iter().all(|v| v.is_nan()));
}
