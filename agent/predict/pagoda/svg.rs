//! The plan as SVG, titled with the model, the batch and the board: the model's layers and
//! its total on the time roofline (GFLOP/s against FLOP/byte) and the energy roofline (pJ per
//! FLOP against FLOP/byte) of the planned mode and of the reference (MAXN), log-log, with
//! decade ticks, units and a legend. Layers without FLOPs (views, copies) have no place on
//! these axes and are left out (the legend says how many).

use super::plan::{ModePrediction, ModeRoofline, Plan, Rooflines};
use super::Report;
use crate::gpu::roofline::Precision;
use crate::support::plot::{fail, log_grid, log_log_panels, log_range, Axes, PlotError};
use plotters::prelude::*;

const COLOURS: [RGBColor; 2] = [RGBColor(214, 39, 40), RGBColor(31, 119, 180)];

/// The planned mode and the reference on their rooflines, with the model's layers.
pub fn plan_svg(report: &Report, rooflines: &Rooflines, plan: &Plan) -> Result<String, PlotError> {
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
        // The layers and the whole model: the axes hold both (a review found the model's
        // circle clamped to a corner where zero-FLOP layers dominate).
        for (x, y, e) in counted.iter().map(|&i| point(p, i)).chain([total(p)]) {
            xs.push(x);
            perf.push(y);
            energy.push(e);
        }
        let r = &rooflines.modes[m];
        perf.push(peak(r) / 1e9);
        energy.push(eps(r) * 1e12);
    }
    let x = log_range(xs.iter().copied());
    let title = format!("{} at batch {}", report.model, report.batch);
    let simulated = if rooflines.simulated {
        " (SIMULATED)"
    } else {
        ""
    };
    let (time_title, energy_title) = (
        format!("{title}: time roofline, {}{simulated}", rooflines.device),
        format!("{title}: energy roofline"),
    );
    let axes = [
        Axes {
            title: &time_title,
            x_label: "arithmetic intensity (FLOP/byte)",
            y_label: "attainable GFLOP/s",
            x,
            y: log_range(perf.into_iter()),
        },
        Axes {
            title: &energy_title,
            x_label: "arithmetic intensity (FLOP/byte)",
            y_label: "energy (pJ/FLOP)",
            x,
            y: log_range(energy.into_iter()),
        },
    ];
    let legend: Vec<(String, RGBColor)> = shown
        .iter()
        .zip(COLOURS)
        .map(|(&m, colour)| {
            let p = &plan.modes[m];
            let role = if m == plan.reference {
                "reference"
            } else {
                "plan"
            };
            let text = format!(
                "{} ({role}): {:.3} ms, {:.3} mJ; circles: the {} layers with FLOPs of {}, the filled one the whole model",
                p.mode,
                p.latency_s * 1e3,
                p.energy_j * 1e3,
                counted.len(),
                report.layers.len()
            );
            (text, colour)
        })
        .collect();
    let grid = log_grid(x, 100);
    log_log_panels(&axes, &legend, |panel, chart| {
        for (&m, colour) in shown.iter().zip(COLOURS) {
            let (r, p) = (&rooflines.modes[m], &plan.modes[m]);
            let (pk, bw) = (peak(r), r.time.peak_bytes_per_s);
            // Energy per FLOP at intensity I running at the roof: eps_flop + eps_byte / I + pi0 t / W.
            let curve = |i: f64| match panel {
                0 => (i * bw).min(pk) / 1e9,
                _ => (eps(r) + r.energy.eps_byte_j / i + r.energy.pi0_w / (i * bw).min(pk)) * 1e12,
            };
            chart
                .draw_series(LineSeries::new(
                    grid.clone().map(|i| (i, curve(i))),
                    colour.stroke_width(2),
                ))
                .map_err(fail)?;
            let y =
                |(x, perf, energy): (f64, f64, f64)| (x, if panel == 0 { perf } else { energy });
            chart
                .draw_series(
                    counted
                        .iter()
                        .map(|&i| Circle::new(y(point(p, i)), 3, colour.stroke_width(1))),
                )
                .map_err(fail)?;
            chart
                .draw_series([Circle::new(y(total(p)), 7, colour.filled())])
                .map_err(fail)?;
        }
        Ok(())
    })
}
