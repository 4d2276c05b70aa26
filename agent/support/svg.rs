//! Log-log SVG panels, for the plots jpower writes itself (the roofline, the inference
//! plan): a panel maps data to pixels and draws its frame, decade ticks with their values,
//! axis labels, polylines and dots.

use std::fmt::Write;

/// A panel's width and height, and its margin, pixels.
pub const W: f64 = 560.0;
/// A panel's height, pixels.
pub const H: f64 = 420.0;
/// A panel's margin, pixels.
pub const PAD: f64 = 60.0;

/// A log-log panel `left` pixels from the left edge, spanning the decades `x` and `y`
/// (base-10 logarithms).
pub struct Panel {
    /// The panel's left edge, pixels.
    pub left: f64,
    /// The x axis' range, log10.
    pub x: (f64, f64),
    /// The y axis' range, log10.
    pub y: (f64, f64),
}

impl Panel {
    /// The pixel of data point (`x`, `y`).
    pub fn px(&self, x: f64, y: f64) -> (f64, f64) {
        let fx = (x.log10() - self.x.0) / (self.x.1 - self.x.0);
        let fy = (y.log10() - self.y.0) / (self.y.1 - self.y.0);
        (
            self.left + PAD + fx * (W - 1.5 * PAD),
            H - PAD - fy * (H - 1.5 * PAD),
        )
    }

    /// The frame, the title, the axis labels and a tick with its value at every decade.
    pub fn axes(&self, s: &mut String, title: &str, xlabel: &str, ylabel: &str) {
        let (l, r, top, bottom) = (
            self.left + PAD,
            self.left + W - PAD / 2.0,
            PAD / 2.0,
            H - PAD,
        );
        let _ = writeln!(s, "<rect x=\"{l}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>", r - l, bottom - top);
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>",
            (l + r) / 2.0,
            escape(title)
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (l + r) / 2.0,
            H - 18.0,
            escape(xlabel)
        );
        let _ = writeln!(
            s,
            "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            self.left + 16.0,
            (top + bottom) / 2.0,
            escape(ylabel)
        );
        for e in (self.x.0.floor() as i32)..=(self.x.1.ceil() as i32) {
            let v = 10f64.powi(e);
            let (x, _) = self.px(v, 10f64.powf(self.y.0));
            if (l - 0.5..=r + 0.5).contains(&x) {
                let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#444\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>", bottom + 5.0, bottom + 18.0, tick(v));
            }
        }
        for e in (self.y.0.floor() as i32)..=(self.y.1.ceil() as i32) {
            let v = 10f64.powi(e);
            let (_, y) = self.px(10f64.powf(self.x.0), v);
            if (top - 0.5..=bottom + 0.5).contains(&y) {
                let _ = writeln!(s, "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{}</text>", l - 5.0, l - 8.0, y + 4.0, tick(v));
            }
        }
    }

    /// A polyline through data points, dashed or solid.
    pub fn polyline(
        &self,
        s: &mut String,
        pts: impl Iterator<Item = (f64, f64)>,
        colour: &str,
        dash: bool,
    ) {
        let p: Vec<String> = pts
            .map(|(x, y)| {
                let (a, b) = self.px(x, y);
                format!("{a:.1},{b:.1}")
            })
            .collect();
        let dash = if dash {
            " stroke-dasharray=\"5,4\""
        } else {
            ""
        };
        let _ = writeln!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"{dash}/>", p.join(" "));
    }

    /// `f` drawn across the whole x range.
    pub fn curve(&self, s: &mut String, f: impl Fn(f64) -> f64, colour: &str) {
        let xs =
            (0..=100).map(|i| 10f64.powf(self.x.0 + (self.x.1 - self.x.0) * f64::from(i) / 100.0));
        self.polyline(s, xs.map(|x| (x, f(x))), colour, false);
    }

    /// A dot of radius `r`, filled or hollow.
    pub fn dot(&self, s: &mut String, x: f64, y: f64, r: f64, colour: &str, filled: bool) {
        let (a, b) = self.px(x, y);
        let fill = if filled { colour } else { "white" };
        let _ = writeln!(
            s,
            "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"{r}\" fill=\"{fill}\" stroke=\"{colour}\"/>"
        );
    }
}

/// The decades (log10) spanning the positive finite `values`, with a margin of a fifth
/// of a decade; `(0, 1)` without any.
pub fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    ((lo.log10() - 0.2).floor(), (hi.log10() + 0.2).ceil())
}

/// A tick's label: the value, or `1e-5` style outside 0.001..100000.
fn tick(v: f64) -> String {
    if (1e-3..1e5).contains(&v) {
        format!("{v}")
    } else {
        format!("1e{}", v.log10().round())
    }
}

/// `t` with the characters XML reserves escaped.
pub fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panel_maps_decades_to_its_frame_and_labels_them() {
        let p = Panel {
            left: 0.0,
            x: (0.0, 2.0),
            y: (-1.0, 1.0),
        };
        assert_eq!(p.px(1.0, 0.1), (PAD, H - PAD));
        assert_eq!(p.px(100.0, 10.0), (W - PAD / 2.0, PAD / 2.0));
        let mut s = String::new();
        p.axes(&mut s, "a <b>", "FLOP/byte", "W");
        assert!(s.contains("a &lt;b&gt;") && s.contains(">100<") && s.contains(">0.1<"));
        assert_eq!(
            log_range([0.5, 20.0, -1.0, f64::NAN].into_iter()),
            (-1.0, 2.0)
        );
        assert_eq!(tick(1e-6), "1e-6");
    }
}
