//! The plot of `jpower optimize --svg`, drawn by `plotters` into SVG (its text is SVG text
//! the viewer lays out, so no system font is needed): every predicted mode, the predicted
//! Pareto front, the profiled modes, the power budget, each verification run as measured
//! (joined to its prediction) and the choice, on a log time axis with ticks and units, under
//! a title naming the board and the workload.

use crate::predict::optimize::{Measured, TimePower};
use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// What the plot shows.
pub struct ParetoPlot<'a> {
    /// The board and the workload, for the title.
    pub title: String,
    /// Every predicted mode.
    pub all: &'a [TimePower],
    /// The predicted Pareto front, fastest first.
    pub front: &'a [TimePower],
    /// The profiled modes, as predicted.
    pub profiled: Vec<TimePower>,
    /// The power budget, watts.
    pub budget_w: Option<f64>,
    /// The verification runs: each mode as predicted, and as measured.
    pub runs: &'a [(TimePower, Measured)],
    /// The mode chosen.
    pub chosen: Option<&'a TimePower>,
}

/// Most predicted modes drawn as dots (the rest are thinned evenly).
const DOTS: usize = 3000;

/// The plot as an SVG document.
pub fn render(p: &ParetoPlot) -> Result<String> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing the Pareto plot: {e}");
    let finite = p
        .all
        .iter()
        .chain(p.runs.iter().map(|(t, _)| t))
        .filter(|t| t.time_ms > 0.0 && t.time_ms.is_finite() && t.power_w.is_finite());
    let measured = p.runs.iter().map(|(_, m)| (m.time_ms, m.power_w));
    let (times, powers): (Vec<f64>, Vec<f64>) = finite
        .map(|t| (t.time_ms, t.power_w))
        .chain(measured.filter(|(t, w)| *t > 0.0 && w.is_finite()))
        .unzip();
    let tmin = times.iter().copied().fold(f64::MAX, f64::min);
    let tmax = times.iter().copied().fold(0.0, f64::max);
    if times.is_empty() || tmin >= tmax {
        return Err(anyhow!(
            "drawing the Pareto plot: no spread of predicted times"
        ));
    }
    let pmax = powers.iter().copied().chain(p.budget_w).fold(0.0, f64::max) * 1.08;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&p.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((tmin * 0.9..tmax * 1.1).log_scale(), 0.0..pmax)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("time per minibatch (ms, log scale)")
            .y_desc("power (W)")
            .light_line_style(WHITE)
            .draw()
            .map_err(|e| err(&e))?;
        let grey = RGBColor(180, 180, 180);
        let step = (p.all.len() / DOTS).max(1);
        chart
            .draw_series(
                p.all
                    .iter()
                    .step_by(step)
                    .map(|t| Circle::new((t.time_ms, t.power_w), 1, grey.filled())),
            )
            .map_err(|e| err(&e))?
            .label("predicted modes")
            .legend(move |(x, y)| Circle::new((x + 10, y), 2, grey.filled()));
        chart
            .draw_series(LineSeries::new(
                p.front.iter().map(|t| (t.time_ms, t.power_w)),
                BLUE.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label("predicted Pareto front")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        let green = RGBColor(44, 160, 44);
        chart
            .draw_series(
                p.profiled
                    .iter()
                    .map(|t| Circle::new((t.time_ms, t.power_w), 3, green.stroke_width(1))),
            )
            .map_err(|e| err(&e))?
            .label("profiled modes")
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, green.stroke_width(1)));
        if let Some(b) = p.budget_w {
            chart
                .draw_series(LineSeries::new(
                    [(tmin * 0.9, b), (tmax * 1.1, b)],
                    RED.stroke_width(1),
                ))
                .map_err(|e| err(&e))?
                .label(format!("budget {b} W"))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        }
        if !p.runs.is_empty() {
            let orange = RGBColor(255, 127, 14);
            chart
                .draw_series(p.runs.iter().map(|(t, m)| {
                    PathElement::new(
                        [(t.time_ms, t.power_w), (m.time_ms, m.power_w)],
                        orange.stroke_width(1),
                    )
                }))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(
                    p.runs.iter().map(|(_, m)| {
                        Cross::new((m.time_ms, m.power_w), 5, orange.stroke_width(2))
                    }),
                )
                .map_err(|e| err(&e))?
                .label("verification runs, measured (line: from the prediction)")
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, orange.stroke_width(2)));
        }
        if let Some(c) = p.chosen {
            chart
                .draw_series([Circle::new((c.time_ms, c.power_w), 6, RED.filled())])
                .map_err(|e| err(&e))?
                .label("chosen")
                .legend(|(x, y)| Circle::new((x + 10, y), 5, RED.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(mode: usize, time_ms: f64, power_w: f64) -> TimePower {
        TimePower {
            mode,
            time_ms,
            power_w,
        }
    }

    #[test]
    fn the_plot_names_its_board_and_draws_the_budget_the_runs_and_ticks() {
        let all = [tp(0, 10.0, 30.0), tp(1, 20.0, 15.0), tp(2, 40.0, 9.0)];
        let runs = [(
            all[1],
            Measured {
                time_ms: 21.5,
                power_w: 16.25,
            },
        )];
        let svg = render(&ParetoPlot {
            title: "SIMULATED orin-agx@r35: resnet18".into(),
            all: &all,
            front: &all,
            profiled: vec![all[2]],
            budget_w: Some(17.0),
            runs: &runs,
            chosen: Some(&all[1]),
        })
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "SIMULATED orin-agx@r35: resnet18",
            "budget 17 W",
            "time per minibatch (ms, log scale)",
            "power (W)",
            "verification runs, measured",
            "chosen",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Ticks with their values on both axes (each label an SVG text of its own).
        let labels: Vec<&str> = svg.lines().map(str::trim).collect();
        for tick in ["15.0", "30.0", "10.0", "20.0"] {
            assert!(labels.contains(&tick), "no tick {tick}");
        }
    }
}
