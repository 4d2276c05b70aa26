//! Plots as SVG, drawn by `plotters` (its text is SVG text the viewer lays out, so with its
//! default features off it needs no system font): side-by-side log-log panels, each with a
//! title, axis labels and ticks, above a few lines of legend text. The roofline and the
//! inference plan are drawn this way; the Pareto plot builds its own linear-log chart.

use plotters::prelude::*;

/// A panel's width and height, pixels.
pub const PANEL: (u32, u32) = (560, 420);

/// A chart of one panel, its axes logarithmic.
pub type LogChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, LogCoord<f64>>>;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the plot: {0}")]
pub struct PlotError(String);

/// A plotters error as a [`PlotError`].
pub fn fail(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// One panel: its title, axis labels and the data ranges its axes span.
pub struct Axes<'t> {
    /// The panel's title.
    pub title: &'t str,
    /// The x axis' label, with its unit.
    pub x_label: &'t str,
    /// The y axis' label, with its unit.
    pub y_label: &'t str,
    /// The x axis' range (positive).
    pub x: (f64, f64),
    /// The y axis' range (positive).
    pub y: (f64, f64),
}

/// An SVG document of the panels `axes` side by side, above the lines of `legend` (each in
/// its colour); `draw(k, chart)` draws the series of panel `k`.
pub fn log_log_panels(
    axes: &[Axes],
    legend: &[(String, RGBColor)],
    mut draw: impl FnMut(usize, &mut LogChart) -> Result<(), PlotError>,
) -> Result<String, PlotError> {
    let (w, h) = PANEL;
    let height = h + 20 * legend.len() as u32 + 12;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w * axes.len().max(1) as u32, height))
            .into_drawing_area();
        root.fill(&WHITE).map_err(fail)?;
        let (top, bottom) = root.split_vertically(h);
        let areas = top.split_evenly((1, axes.len().max(1)));
        for (k, (area, a)) in areas.iter().zip(axes).enumerate() {
            let mut chart = ChartBuilder::on(area)
                .caption(a.title, ("sans-serif", 17))
                .margin(12)
                .x_label_area_size(42)
                .y_label_area_size(58)
                .build_cartesian_2d((a.x.0..a.x.1).log_scale(), (a.y.0..a.y.1).log_scale())
                .map_err(fail)?;
            chart
                .configure_mesh()
                .x_desc(a.x_label)
                .y_desc(a.y_label)
                .light_line_style(WHITE)
                .draw()
                .map_err(fail)?;
            draw(k, &mut chart)?;
        }
        for (i, (text, colour)) in legend.iter().enumerate() {
            let style = ("sans-serif", 14).into_font().color(colour);
            let at = (12, 4 + 20 * i as i32);
            bottom
                .draw(&Text::new(text.as_str(), at, style))
                .map_err(fail)?;
        }
        root.present().map_err(fail)?;
    }
    Ok(svg)
}

/// The whole decades spanning the positive finite `values`, with a margin of a fifth of a
/// decade each way; `(1, 10)` without any.
pub fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    (
        10f64.powf((lo.log10() - 0.2).floor()),
        10f64.powf((hi.log10() + 0.2).ceil()),
    )
}

/// [`log_range`] of shares in percent: no axis past 100 %, and the decade below it at
/// least.
pub fn percent_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = log_range(values);
    (lo.min(10.0), hi.min(100.0))
}

/// `n + 1` points evenly spaced in log space across `range`.
pub fn log_grid(range: (f64, f64), n: u32) -> impl Iterator<Item = f64> + Clone {
    let (a, b) = (range.0.log10(), range.1.log10());
    (0..=n).map(move |i| 10f64.powf(a + (b - a) * f64::from(i) / f64::from(n.max(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_carry_their_titles_labels_ticks_and_legend() {
        let axes = [
            Axes {
                title: "a <b>",
                x_label: "FLOP/byte",
                y_label: "GFLOP/s",
                x: log_range([0.5, 20.0].into_iter()),
                y: (0.1, 1000.0),
            },
            Axes {
                title: "energy",
                x_label: "FLOP/byte",
                y_label: "pJ per FLOP",
                x: (0.1, 100.0),
                y: (1.0, 100.0),
            },
        ];
        let mut drawn = Vec::new();
        let svg = log_log_panels(&axes, &[("mode 1".into(), RED)], |k, chart| {
            drawn.push(k);
            chart
                .draw_series(LineSeries::new([(1.0, 1.0), (10.0, 100.0)], RED))
                .map_err(fail)?;
            Ok(())
        })
        .unwrap();
        assert_eq!(drawn, [0, 1]);
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "a &lt;b&gt;",
            "GFLOP/s",
            "pJ per FLOP",
            "mode 1",
            "<polyline",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        let lines: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(lines.iter().any(|l| l.starts_with("100")), "no tick at 100");
        assert_eq!(
            log_range([0.5, 20.0, -1.0, f64::NAN].into_iter()),
            (0.1, 100.0)
        );
        // Utilisations of 84-86 % once drew an axis to 1000 % (found by a review).
        assert_eq!(percent_range([84.0, 86.0].into_iter()), (10.0, 100.0));
        assert_eq!(percent_range([3.0, 100.0].into_iter()), (1.0, 100.0));
        assert_eq!(
            log_grid((1.0, 100.0), 2).collect::<Vec<_>>(),
            [1.0, 10.0, 100.0]
        );
    }
}
