//! `report.html` of `jpower characterize`: one self-contained page (no scripts, fonts or
//! images from anywhere) with inline SVG plots drawn by [`crate::support::plot`] (stall
//! against compute per configuration, time and energy per power mode with the Pareto
//! front, mean utilisation, the variability of repeats), the utilisation over the sweep's
//! time, epoch by epoch, and a table naming every configuration.

use crate::predict::characterize::runs::{ModePoint, Run, Summary};
use crate::support::plot::{self, fail, Axes};
use plotters::prelude::*;

/// `&`, `<`, `>` and `"` as HTML entities.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page: `title`, the plots of `sums`, `front` and the `runs` (in sweep order), and
/// the table.
pub fn html(
    title: &str,
    sums: &[Summary],
    front: &[ModePoint],
    runs: &[Run],
) -> Result<String, plot::PlotError> {
    let svg = plots(sums, front)? + "\n" + &timeline(runs)?;
    let mut rows = String::new();
    for s in sums {
        let on = front.iter().any(|f| f.mode == s.mode && f.pareto);
        rows += &format!(
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{:.0}/{:.0}/{:.0}</td><td>{}</td></tr>\n",
            escape(&s.label),
            s.runs,
            s.mean.time_s,
            s.mean.energy_j,
            s.mean.power_w,
            s.mean.stall_s,
            s.mean.compute_s,
            s.time_cv
                .map_or_else(|| "-".to_string(), |cv| format!("{:.3}", cv * 100.0)),
            s.mean.util[0] * 100.0,
            s.mean.util[1] * 100.0,
            s.mean.util[2] * 100.0,
            if on { "yes" } else { "no" },
        );
    }
    Ok(format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n\
<style>body{{font-family:sans-serif;margin:1em}}table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:2px 6px;text-align:right}}td:first-child{{text-align:left}}</style>\n\
</head><body><h1>{t}</h1>\n{svg}\n<h2>Configurations</h2>\n<table><tr><th>configuration</th><th>runs</th><th>time s</th><th>energy J</th><th>power W</th><th>stall s</th><th>compute s</th><th>time CV %</th><th>CPU/GPU/EMC util %</th><th>mode on Pareto front</th></tr>\n{rows}</table>\n</body></html>\n",
        t = escape(title),
    ))
}

/// Four log-log panels: stall against compute (one point per configuration), time
/// against energy per mode (the front joined), GPU against CPU utilisation (one point per
/// configuration), and the CV of the repeats against time.
fn plots(sums: &[Summary], front: &[ModePoint]) -> Result<String, plot::PlotError> {
    let axes = [
        Axes {
            title: "Stall against compute per configuration",
            x_label: "compute time per run (s)",
            y_label: "stall time per run (s)",
            x: plot::log_range(sums.iter().map(|s| s.mean.compute_s)),
            y: plot::log_range(sums.iter().map(|s| s.mean.stall_s)),
        },
        Axes {
            title: "Time and energy per power mode",
            x_label: "time per run (s)",
            y_label: "energy per run (J)",
            x: plot::log_range(front.iter().map(|f| f.time_s)),
            y: plot::log_range(front.iter().map(|f| f.energy_j)),
        },
        Axes {
            title: "Utilisation per configuration",
            x_label: "CPU utilisation (%)",
            y_label: "GPU utilisation (%)",
            x: plot::percent_range(sums.iter().map(|s| s.mean.util[0] * 100.0)),
            y: plot::percent_range(sums.iter().map(|s| s.mean.util[1] * 100.0)),
        },
        Axes {
            title: "Variability across repeats",
            x_label: "time per run (s)",
            y_label: "CV of run time (%)",
            x: plot::log_range(sums.iter().map(|s| s.mean.time_s)),
            y: plot::log_range(sums.iter().filter_map(|s| s.time_cv).map(|cv| cv * 100.0)),
        },
    ];
    let legend = [
        (
            "blue: one configuration (mode, minibatch, workers, medium, cache)".to_string(),
            BLUE,
        ),
        (
            "red: a power mode on the (time, energy) Pareto front, joined; grey: off it"
                .to_string(),
            RED,
        ),
    ];
    plot::log_log_panels(&axes, &legend, |k, chart| {
        let dot = |(x, y), c: RGBColor| Circle::new((x, y), 4, c.filled());
        match k {
            0 => chart
                .draw_series(
                    sums.iter()
                        .map(|s| dot((s.mean.compute_s, s.mean.stall_s), BLUE)),
                )
                .map(|_| ()),
            1 => {
                let mut on: Vec<(f64, f64)> = front
                    .iter()
                    .filter(|f| f.pareto)
                    .map(|f| (f.time_s, f.energy_j))
                    .collect();
                on.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart.draw_series(LineSeries::new(on, RED)).map_err(fail)?;
                chart
                    .draw_series(front.iter().map(|f| {
                        let c = if f.pareto {
                            RED
                        } else {
                            RGBColor(128, 128, 128)
                        };
                        dot((f.time_s, f.energy_j), c)
                    }))
                    .map(|_| ())
            }
            2 => chart
                .draw_series(
                    sums.iter()
                        .map(|s| dot((s.mean.util[0] * 100.0, s.mean.util[1] * 100.0), BLUE)),
                )
                .map(|_| ()),
            _ => chart
                .draw_series(
                    sums.iter()
                        .filter_map(|s| Some((s.mean.time_s, s.time_cv.filter(|&cv| cv > 0.0)?)))
                        .map(|(t, cv)| dot((t, cv * 100.0), BLUE)),
                )
                .map(|_| ()),
        }
        .map_err(fail)
    })
}

/// CPU, GPU and EMC utilisation over the sweep's time: each epoch of each run (in sweep
/// order) one step at its mean, on a linear scale; a counter an epoch did not measure
/// leaves a gap.
fn timeline(runs: &[Run]) -> Result<String, plot::PlotError> {
    let mut steps: Vec<(f64, f64, [f64; 3])> = Vec::new();
    let mut t = 0.0;
    for e in runs.iter().flat_map(|r| &r.epochs) {
        steps.push((t, t + e.time_s, e.util));
        t += e.time_s;
    }
    let lines = [("CPU", BLUE), ("GPU", GREEN), ("EMC", RED)];
    let (w, h) = plot::PANEL;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (2 * w, h + 32)).into_drawing_area();
        root.fill(&WHITE).map_err(fail)?;
        let (top, bottom) = root.split_vertically(h);
        let mut chart = ChartBuilder::on(&top)
            .caption(
                "Utilisation over the sweep, epoch by epoch",
                ("sans-serif", 17),
            )
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(58)
            .build_cartesian_2d(0.0..t.max(f64::MIN_POSITIVE), 0.0..100.0)
            .map_err(fail)?;
        chart
            .configure_mesh()
            .x_desc("time since the sweep's first epoch (s)")
            .y_desc("utilisation (%)")
            .light_line_style(WHITE)
            .draw()
            .map_err(fail)?;
        for (k, (_, colour)) in lines.iter().enumerate() {
            let segments = steps
                .iter()
                .filter(|s| s.2[k].is_finite())
                .map(|&(a, b, u)| {
                    PathElement::new(
                        vec![(a, u[k] * 100.0), (b, u[k] * 100.0)],
                        colour.stroke_width(2),
                    )
                });
            chart.draw_series(segments).map_err(fail)?;
        }
        for (i, (name, colour)) in lines.iter().enumerate() {
            let style = ("sans-serif", 14).into_font().color(colour);
            let at = (12 + 120 * i as i32, 8);
            bottom
                .draw(&Text::new(format!("{name} utilisation"), at, style))
                .map_err(fail)?;
        }
        root.present().map_err(fail)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::characterize::runs::{Cache, Config, EpochRow};

    #[test]
    fn the_page_names_every_configuration_escaped_and_loads_nothing() {
        let s = |label: &str, mode: &str, t| Summary {
            label: label.into(),
            mode: mode.into(),
            batch: 16,
            workers: 0,
            medium: "sd".into(),
            cache: "warm",
            runs: 2,
            mean: EpochRow {
                time_s: t,
                energy_j: 10.0 * t,
                power_w: 10.0,
                stall_s: 1.0,
                compute_s: t - 1.0,
                util: [0.5, 0.9, 0.3],
                disk_mb_s: 0.0,
                resident: 1.0,
            },
            time_cv: Some(0.01),
            times_s: vec![t, t],
        };
        let sums = [
            s("MAXN bs16 <w0>", "MAXN", 5.0),
            s("15W bs16 w0", "15W", 9.0),
        ];
        let point = |mode: &str, t: f64, pareto| ModePoint {
            mode: mode.into(),
            time_s: t,
            energy_j: 10.0 * t,
            power_w: 10.0,
            configurations: 1,
            pareto,
        };
        let front = [point("MAXN", 5.0, true), point("15W", 9.0, false)];
        let run = Run {
            config: Config {
                mode: "MAXN".into(),
                batch: 16,
                workers: 0,
                medium: "sd".into(),
                cache: Cache::Warm,
                repeat: 0,
            },
            epochs: vec![
                sums[0].mean,
                EpochRow {
                    util: [0.2, f64::NAN, 0.4],
                    ..sums[0].mean
                },
            ],
        };
        let page = html("t & u", &sums, &front, &[run]).unwrap();
        assert!(page.contains("MAXN bs16 &lt;w0&gt;") && page.contains("15W bs16 w0"));
        assert!(page.contains("<title>t &amp; u</title>"));
        for label in [
            "CV of run time (%)",
            "GPU utilisation (%)",
            "energy per run (J)",
            "time since the sweep&apos;s first epoch (s)",
            "GPU utilisation",
        ] {
            assert!(page.contains(label), "{label} missing");
        }
        let outside = page
            .replace("http://www.w3.org/2000/svg", "")
            .contains("http");
        assert!(!outside, "the page refers to the network");
    }
}
