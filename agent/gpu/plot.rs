//! The roofline plot as SVG (drawn by `plotters`, [`crate::support::plot`]): a log-log time
//! roofline (achieved GFLOP/s against FLOP/byte, the measured points and each mode's fitted
//! roofs, FP32 solid and FP16 dashed) and an energy panel (picojoules per FLOP against
//! FLOP/byte, the points and the fitted energy roofline, FP32 solid and FP16 dashed where
//! FP16 was measured).

use super::roofline::{EnergyRoofline, Kernel, Measured, TimeRoofline};
use crate::support::plot::{fail, log_grid, log_log_panels, log_range, Axes, PlotError};
use plotters::prelude::*;

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

/// One colour a mode.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Renders the two panels for every mode of `series`; `title` names the board and says
/// whether it was simulated.
pub fn svg(title: &str, series: &[Series]) -> Result<String, PlotError> {
    let swept = |m: &&Measured| m.point.flops() > 0.0 && m.point.kernel != Kernel::Triad;
    let x = log_range(
        series
            .iter()
            .flat_map(|s| s.points.iter().filter(swept).map(|m| m.intensity)),
    );
    let perf = log_range(series.iter().flat_map(|s| {
        s.points
            .iter()
            .filter(swept)
            .map(|m| m.flops_per_s / 1e9)
            .chain([
                s.time.peak_f16_flops / 1e9 * 1.2,
                s.time.peak_bytes_per_s / 1e9 * x.0,
            ])
    }));
    let pj = |m: &Measured| m.energy_j / m.point.flops() * 1e12;
    let energy = log_range(
        series
            .iter()
            .flat_map(|s| s.points.iter().filter(swept).map(pj)),
    );
    let time_title = format!("Time roofline: {title}");
    let axes = [
        Axes {
            title: &time_title,
            x_label: "FLOP/byte",
            y_label: "GFLOP/s (best launch)",
            x,
            y: perf,
        },
        Axes {
            title: "Energy roofline",
            x_label: "FLOP/byte",
            y_label: "pJ per FLOP",
            x,
            y: energy,
        },
    ];
    let mut legend: Vec<(String, RGBColor)> = series
        .iter()
        .zip(COLOURS.iter().cycle())
        .map(|(se, &c)| {
            let e = se.energy;
            (
                format!(
                    "{}: FP32 {:.2} TFLOP/s, {:.1} GB/s, ridge {:.1} FLOP/B; {:.1} pJ/FLOP, {:.1} pJ/B, {:.2} W constant",
                    se.name,
                    se.time.peak_f32_flops / 1e12,
                    se.time.peak_bytes_per_s / 1e9,
                    se.time.ridge_f32,
                    e.eps_flop_j * 1e12,
                    e.eps_byte_j * 1e12,
                    e.pi0_w
                ),
                c,
            )
        })
        .collect();
    legend.push((
        "filled: FP32, hollow: FP16 (half2); solid roof FP32, dashed FP16".into(),
        BLACK,
    ));
    let grid = log_grid(x, 60);
    log_log_panels(&axes, &legend, |panel, chart| {
        for (se, &c) in series.iter().zip(COLOURS.iter().cycle()) {
            let (p32, p16, bw) = (
                se.time.peak_f32_flops,
                se.time.peak_f16_flops,
                se.time.peak_bytes_per_s,
            );
            let roof = |peak: f64| grid.clone().map(move |ai| (ai, (ai * bw).min(peak) / 1e9));
            let e = se.energy;
            // Picojoules per FLOP at `ai`: the FLOP's own energy, the bytes' and the
            // constant power over the roofline's time at that precision's peak.
            let model = |eps_flop: f64, peak: f64| {
                grid.clone().map(move |ai| {
                    let pj =
                        eps_flop + e.eps_byte_j / ai + e.pi0_w * (1.0 / peak).max(1.0 / (ai * bw));
                    (ai, pj * 1e12)
                })
            };
            if panel == 0 {
                chart
                    .draw_series(LineSeries::new(roof(p32), c.stroke_width(2)))
                    .map_err(fail)?;
                chart
                    .draw_series(DashedLineSeries::new(roof(p16), 6, 4, c.stroke_width(2)))
                    .map_err(fail)?;
            } else {
                chart
                    .draw_series(LineSeries::new(model(e.eps_flop_j, p32), c.stroke_width(2)))
                    .map_err(fail)?;
                if let Some(f16) = e.eps_flop_f16_j {
                    chart
                        .draw_series(DashedLineSeries::new(
                            model(f16, p16),
                            6,
                            4,
                            c.stroke_width(2),
                        ))
                        .map_err(fail)?;
                }
            }
            let dots = se.points.iter().filter(swept).map(|m| {
                let y = if panel == 0 {
                    m.flops_per_s / 1e9
                } else {
                    pj(m)
                };
                let style = if m.point.kernel == Kernel::SweepF32 {
                    c.filled()
                } else {
                    c.stroke_width(1)
                };
                Circle::new((m.intensity, y), 4, style)
            });
            chart.draw_series(dots).map_err(fail)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::roofline::{fit_energy, fit_time, tests::synthetic};

    /// Found by a review: the legend said "dashed FP16" of both panels, but the energy panel
    /// drew the FP32 model alone, so FP16 points sat far below the only curve there.
    #[test]
    fn the_energy_panel_draws_the_fp16_model_its_legend_names() {
        let points = synthetic(5.3e12, 1.8e11, [8e-12, 1.2e-10, 9.5]);
        let (time, energy) = (fit_time(&points), fit_energy(&points));
        let without = EnergyRoofline {
            eps_flop_f16_j: None,
            ..energy.clone()
        };
        let lines = |energy: &EnergyRoofline| {
            let series = Series {
                name: "MAXN",
                points: &points,
                time: &time,
                energy,
            };
            svg("t", &[series]).unwrap().matches("<polyline").count()
        };
        // A dashed curve is many short lines.
        assert!(lines(&energy) > lines(&without) + 5);
    }
}
