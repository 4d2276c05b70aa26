//! The plan as SVG: the model's layers and its total on the time roofline (GFLOP/s against
//! FLOP/byte) and the energy roofline (pJ per FLOP against FLOP/byte) of the planned mode
//! and of the reference (MAXN), log-log, with decade ticks, units and a legend. Layers
//! without FLOPs (views, copies) have no place on these axes and are left out (the legend
//! says how many).

use super::plan::{ModePrediction, ModeRoofline, Plan, Rooflines};
use super::Report;
use crate::gpu::roofline::Precision;
use crate::support::svg::{escape, log_range, Panel, H, PAD, W};
use std::fmt::Write;

const COLOURS: [&str; 2] = ["#d62728", "#1f77b4"];

/// The planned mode and the reference on their rooflines, with the model's layers.
pub fn plan_svg(report: &Report, rooflines: &Rooflines, plan: &Plan) -> String {
    let peak = |m: &ModeRoofline| match report.precision {
        Precision::F16 if m.time.peak_f16_flops > 0.0 => m.time.peak_f16_flops,
        _ => m.time.peak_f32_flops,
    };
    let eps = |m: &ModeRoofline| match report.precision {
        Precision::F16 => m.energy.eps_flop_f16_j.unwrap_or(m.energy.eps_flop_j),
        Precision::F32 => m.energy.eps_flop_j,
    };
    let shown: Vec<usize> = if plan.feasible[0] == plan.reference {
        vec![plan.reference]
    } else {
        vec![plan.feasible[0], plan.reference]
    };
    let counted: Vec<usize> = (0..report.layers.len())
        .filter(|&i| report.layers[i].counts.flops > 0 && report.layers[i].counts.bytes() > 0)
        .collect();
    // Per layer: intensity, achieved GFLOP/s and pJ/FLOP on a mode.
    let point = |p: &ModePrediction, i: usize| {
        let c = &report.layers[i].counts;
        let t = p.layers[i].time_s;
        (
            c.intensity(),
            c.flops as f64 / t / 1e9,
            p.layers[i].energy_j / c.flops as f64 * 1e12,
        )
    };
    let total = |p: &ModePrediction| {
        let c = &report.total;
        (
            c.intensity(),
            c.flops as f64 / p.latency_s / 1e9,
            p.energy_j / c.flops as f64 * 1e12,
        )
    };
    let mut xs = Vec::new();
    let mut perf = Vec::new();
    let mut energy = Vec::new();
    for &m in &shown {
        let p = &plan.modes[m];
        for &i in &counted {
            let (x, y, e) = point(p, i);
            xs.push(x);
            perf.push(y);
            energy.push(e);
        }
        let r = &rooflines.modes[m];
        perf.push(peak(r) / 1e9);
        energy.push(eps(r) * 1e12);
    }
    let x = log_range(xs.iter().copied());
    let time_panel = Panel {
        left: 0.0,
        x,
        y: log_range(perf.into_iter()),
    };
    let energy_panel = Panel {
        left: W,
        x,
        y: log_range(energy.into_iter()),
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * W,
        H + 30.0 + 18.0 * shown.len() as f64
    );
    let title = format!("{} at batch {}", report.model, report.batch);
    time_panel.axes(
        &mut s,
        &format!("{title}: time roofline"),
        "arithmetic intensity (FLOP/byte)",
        "attainable GFLOP/s",
    );
    energy_panel.axes(
        &mut s,
        &format!("{title}: energy roofline"),
        "arithmetic intensity (FLOP/byte)",
        "energy (pJ/FLOP)",
    );
    for (k, &m) in shown.iter().enumerate() {
        let (r, p, colour) = (&rooflines.modes[m], &plan.modes[m], COLOURS[k]);
        let (pk, bw) = (peak(r), r.time.peak_bytes_per_s);
        time_panel.curve(&mut s, |i| (i * bw).min(pk) / 1e9, colour);
        // Energy per FLOP at intensity I running at the roof: eps_flop + eps_byte / I + pi0 t / W.
        energy_panel.curve(
            &mut s,
            |i| (eps(r) + r.energy.eps_byte_j / i + r.energy.pi0_w / (i * bw).min(pk)) * 1e12,
            colour,
        );
        for &i in &counted {
            let (x, y, e) = point(p, i);
            time_panel.dot(&mut s, x, y, 3.0, colour, false);
            energy_panel.dot(&mut s, x, e, 3.0, colour, false);
        }
        let (x, y, e) = total(p);
        time_panel.dot(&mut s, x, y, 7.0, colour, true);
        energy_panel.dot(&mut s, x, e, 7.0, colour, true);
        let role = if m == plan.reference {
            "reference"
        } else {
            "plan"
        };
        let _ = writeln!(
            s,
            "<rect x=\"{PAD}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{} ({role}): {:.3} ms, {:.3} J; circles: the {} layers with FLOPs of {}, the filled one the whole model</text>",
            H + 6.0 + 18.0 * k as f64,
            PAD + 18.0,
            H + 16.0 + 18.0 * k as f64,
            escape(&p.mode),
            p.latency_s * 1e3,
            p.energy_j,
            counted.len(),
            report.layers.len()
        );
    }
    s.push_str("</svg>\n");
    s
}
