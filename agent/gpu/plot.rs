//! The roofline plot as SVG, written by jpower itself: a log-log time roofline (achieved
//! GFLOP/s against FLOP/byte, the measured points and each mode's fitted roof) and an
//! energy panel (picojoules per FLOP against FLOP/byte, the points and the fitted energy
//! roofline).

use super::roofline::{EnergyRoofline, Kernel, Measured, TimeRoofline};
use crate::support::svg::{escape, log_range, Panel, H, PAD, W};
use std::fmt::Write;

/// One mode's series.
pub struct Series<'a> {
    /// The mode's name, as the legend shows it.
    pub name: &'a str,
    /// The points measured in this mode.
    pub points: &'a [Measured],
    /// The time roofline fitted to them.
    pub time: &'a TimeRoofline,
    /// The energy roofline fitted to them.
    pub energy: &'a EnergyRoofline,
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];
/// Renders the two panels for every mode of `series`; `title` names the board and says
/// whether it was simulated.
pub fn svg(title: &str, series: &[Series]) -> String {
    let swept = |m: &&Measured| m.point.flops() > 0.0 && m.point.kernel != Kernel::Triad;
    let xs = series
        .iter()
        .flat_map(|s| s.points.iter().filter(swept).map(|m| m.intensity));
    let x = log_range(xs.clone());
    let perf = Panel {
        left: 0.0,
        x,
        y: log_range(series.iter().flat_map(|s| {
            s.points
                .iter()
                .filter(swept)
                .map(|m| m.flops_per_s / 1e9)
                .chain([
                    s.time.peak_f16_flops / 1e9 * 1.2,
                    s.time.peak_bytes_per_s / 1e9 * 10f64.powf(x.0),
                ])
        })),
    };
    let pj = |m: &Measured| m.energy_j / m.point.flops() * 1e12;
    let energy = Panel {
        left: W,
        x,
        y: log_range(
            series
                .iter()
                .flat_map(|s| s.points.iter().filter(swept).map(pj)),
        ),
    };
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", 2.0 * W, H + 20.0 * series.len() as f64 + 10.0);
    perf.axes(
        &mut s,
        &format!("Time roofline: {title}"),
        "FLOP/byte",
        "GFLOP/s (best launch)",
    );
    energy.axes(&mut s, "Energy roofline", "FLOP/byte", "pJ per FLOP");
    let grid: Vec<f64> = (0..=60)
        .map(|i| 10f64.powf(x.0 + (x.1 - x.0) * f64::from(i) / 60.0))
        .collect();
    for (i, se) in series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let (p32, bw) = (se.time.peak_f32_flops, se.time.peak_bytes_per_s);
        perf.polyline(
            &mut s,
            grid.iter().map(|&ai| (ai, (ai * bw).min(p32) / 1e9)),
            c,
            false,
        );
        perf.polyline(
            &mut s,
            grid.iter()
                .map(|&ai| (ai, (ai * bw).min(se.time.peak_f16_flops) / 1e9)),
            c,
            true,
        );
        let e = se.energy;
        let model = |ai: f64, peak: f64, eps: f64| {
            (eps + e.eps_byte_j / ai + e.pi0_w * (1.0 / peak).max(1.0 / (ai * bw))) * 1e12
        };
        energy.polyline(
            &mut s,
            grid.iter().map(|&ai| (ai, model(ai, p32, e.eps_flop_j))),
            c,
            false,
        );
        for m in se.points.iter().filter(swept) {
            let f32 = m.point.kernel == Kernel::SweepF32;
            perf.dot(&mut s, m.intensity, m.flops_per_s / 1e9, 3.5, c, f32);
            energy.dot(&mut s, m.intensity, pj(m), 3.5, c, f32);
        }
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{}: FP32 {:.2} TFLOP/s, {:.1} GB/s, ridge {:.1} FLOP/B; {:.1} pJ/FLOP, {:.1} pJ/B, {:.2} W constant</text>",
            PAD, H + 15.0 + 20.0 * i as f64, escape(se.name), p32 / 1e12, bw / 1e9, se.time.ridge_f32,
            e.eps_flop_j * 1e12, e.eps_byte_j * 1e12, e.pi0_w);
    }
    let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" font-size=\"10\">filled: FP32, hollow: FP16 (half2); solid roof FP32, dashed FP16</text>", W + PAD, H - 2.0);
    s.push_str("</svg>\n");
    s
}
