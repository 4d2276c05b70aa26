//! How a [`Snapshot`] looks: drawn with `ratatui` on a terminal (wrapped, never cut to a
//! fixed width, so a narrow terminal or a resize cannot scramble the rows), or as plain
//! rows when stdout is not a terminal. Both show the same lines.

use super::snapshot::{RailRow, Snapshot};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

/// A clock in MHz, or `-` where it cannot be read.
fn mhz(hz: Option<u64>) -> String {
    hz.map_or("-".into(), |hz| format!("{:.1} MHz", hz as f64 / 1e6))
}

/// A share as a whole percentage.
fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

/// The title: the board (whole), the mode and the rates.
fn title(s: &Snapshot) -> String {
    format!(
        "{}  mode {}  sampling at {:.0} Hz of {:.0} Hz requested",
        s.board,
        s.mode.as_deref().unwrap_or("-"),
        s.rates_hz.1,
        s.rates_hz.0
    )
}

/// The board's state beside the rails: clocks, loads, memory, fan, temperatures.
fn state_lines(s: &Snapshot) -> Vec<String> {
    let clusters: Vec<String> = s
        .clusters
        .iter()
        .map(|&(p, khz)| format!("policy{p} {}", mhz(khz.map(|k| k * 1000))))
        .collect();
    let mut lines = vec![
        format!("CPU  {}", clusters.join("  ")),
        format!(
            "GPU  {}  load {}   EMC  {}  activity {}",
            mhz(s.gpu_hz),
            s.gpu_load.map_or("-".into(), pct),
            mhz(s.emc_hz),
            s.emc_activity.map_or("-".into(), pct)
        ),
    ];
    let loads: Vec<String> = s
        .cpu_load
        .iter()
        .map(|&(c, l)| format!("{c}:{}", pct(l)))
        .collect();
    lines.push(format!(
        "CPU load  {}",
        if loads.is_empty() {
            "-".into()
        } else {
            loads.join(" ")
        }
    ));
    let gib = |kb: u64| kb as f64 / (1024.0 * 1024.0);
    lines.push(format!(
        "RAM  {}   swap  {}   fan  {}",
        s.memory.map_or("-".into(), |m| format!(
            "{:.1}/{:.1} GiB",
            gib(m.ram_used_kb),
            gib(m.ram_total_kb)
        )),
        s.memory
            .filter(|m| m.swap_total_kb > 0)
            .map_or("-".into(), |m| format!(
                "{:.1}/{:.1} GiB",
                gib(m.swap_used_kb),
                gib(m.swap_total_kb)
            )),
        s.fan.map_or("-".into(), pct)
    ));
    let temps: Vec<String> = s
        .temps
        .iter()
        .map(|(n, t)| format!("{n} {t:.1}C"))
        .collect();
    lines.push(format!("temp {}", temps.join("  ")));
    lines
}

/// The footer: the module's power, the counters and any alerts.
fn footer(s: &Snapshot) -> String {
    let (samples, overruns, errors) = s.counters;
    format!(
        "module {}  samples {samples}  overruns {overruns}  read errors {errors}  {}",
        s.module_w.map_or("-".into(), |w| format!("{w:.3} W")),
        s.alerts.join(" ")
    )
}

const RAIL_HEADER: [&str; 6] = ["rail", "V", "A", "W", "fresh/s", "age"];

/// A rail's cells, in [`RAIL_HEADER`]'s order.
fn rail_cells(r: &RailRow) -> [String; 6] {
    let (v, a) = r.volts_amps.map_or(("-".into(), "-".into()), |(v, a)| {
        (format!("{v:.3}"), format!("{a:.3}"))
    });
    [
        r.name.clone(),
        v,
        a,
        format!("{:.3}", r.watts),
        format!("{:.1}", r.fresh_per_s),
        r.age_ms.map_or("-".into(), |ms| format!("{ms:.0} ms")),
    ]
}

/// The snapshot as plain rows (stdout is not a terminal): no escapes.
pub fn plain(s: &Snapshot) -> String {
    let mut t = format!("{}\n", title(s));
    for l in state_lines(s) {
        t.push_str(&l);
        t.push('\n');
    }
    if s.rails.is_empty() {
        t.push_str("waiting for the first sample\n");
    }
    let widest = name_width(s);
    for cells in
        std::iter::once(RAIL_HEADER.map(String::from)).chain(s.rails.iter().map(rail_cells))
    {
        t.push_str(&format!(
            "{:<widest$} {:>9} {:>9} {:>10} {:>9} {:>8}\n",
            cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
        ));
    }
    t.push_str(&footer(s));
    t.push_str("\n\n");
    t
}

/// The rail-name column's width: the longest name, at least the header's.
fn name_width(s: &Snapshot) -> usize {
    s.rails
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4)
}

/// Draws the snapshot on the whole frame.
pub fn draw(frame: &mut Frame, s: &Snapshot) {
    let wrap = Wrap { trim: true };
    let width = frame.area().width;
    let head = Paragraph::new(format!("{}   (q quits)", title(s)))
        .style(Style::new().add_modifier(Modifier::BOLD))
        .wrap(wrap);
    let state: Vec<Line> = state_lines(s).into_iter().map(Line::from).collect();
    let board = Paragraph::new(state)
        .block(Block::new().borders(Borders::ALL).title("board"))
        .wrap(wrap);
    let foot = Paragraph::new(footer(s)).wrap(wrap);
    // Each block as tall as its text wrapped to this width; what does not fit is cut at
    // the bottom, never drawn over another block.
    let rows = |p: &Paragraph| p.line_count(width).min(usize::from(u16::MAX)) as u16;
    let [head_area, board_area, rails_area, _, foot_area] = Layout::vertical([
        Constraint::Length(rows(&head)),
        Constraint::Length(rows(&board)),
        Constraint::Length(s.rails.len() as u16 + 3),
        Constraint::Fill(1),
        Constraint::Length(rows(&foot)),
    ])
    .areas(frame.area());
    frame.render_widget(head, head_area);
    frame.render_widget(board, board_area);
    let widest = name_width(s);
    let table = Table::new(
        s.rails.iter().map(|r| Row::new(rail_cells(r))),
        [
            Constraint::Min(widest as u16),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
        ],
    )
    .header(Row::new(RAIL_HEADER).style(Style::new().add_modifier(Modifier::BOLD)))
    .block(Block::new().borders(Borders::ALL).title("rails"));
    frame.render_widget(table, rails_area);
    frame.render_widget(foot, foot_area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn snapshot() -> Snapshot {
        Snapshot {
            board: "NVIDIA Jetson AGX Orin Developer Kit".into(),
            mode: Some("MODE_30W".into()),
            rates_hz: (1000.0, 998.0),
            clusters: vec![(0, Some(2_201_600)), (4, None)],
            gpu_hz: Some(1_300_500_000),
            emc_hz: None,
            gpu_load: Some(0.5),
            emc_activity: Some(0.4),
            cpu_load: vec![],
            memory: None,
            fan: Some(0.25),
            temps: vec![("cpu-thermal".into(), 35.5)],
            rails: vec![RailRow {
                name: "VDD_GPU_SOC".into(),
                volts_amps: Some((19.864, 0.34)),
                watts: 6.754,
                fresh_per_s: 2.3,
                age_ms: Some(12.0),
            }],
            module_w: Some(10.239),
            counters: (427, 0, 0),
            alerts: vec![],
        }
    }

    /// The screen's text, one string per row.
    fn screen(width: u16, height: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        t.draw(|f| draw(f, &snapshot())).unwrap();
        let buf = t.backend().buffer().clone();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_screen_names_the_mode_the_clocks_and_the_rails_and_absent_values_are_dashes() {
        let rows = screen(100, 20).join("\n");
        for want in [
            "NVIDIA Jetson AGX Orin Developer Kit",
            "mode MODE_30W",
            "policy0 2201.6 MHz",
            "policy4 -",
            "GPU  1300.5 MHz  load 50%   EMC  -",
            "CPU load  -",
            "fan  25%",
            "VDD_GPU_SOC",
            "6.754",
            "module 10.239 W",
        ] {
            assert!(rows.contains(want), "{want:?} missing from\n{rows}");
        }
    }

    #[test]
    fn a_narrow_terminal_wraps_the_board_name_instead_of_cutting_it() {
        let rows = screen(30, 24);
        let text: String = rows
            .iter()
            .map(|r| r.trim_end().to_string() + " ")
            .collect();
        assert!(text.contains("NVIDIA Jetson AGX Orin"), "{rows:#?}");
        assert!(text.contains("Developer Kit"), "{rows:#?}");
    }

    #[test]
    fn plain_rows_have_no_escapes_and_the_same_lines() {
        let p = plain(&snapshot());
        assert!(!p.contains('\x1b'));
        assert!(p.contains("mode MODE_30W") && p.contains("VDD_GPU_SOC") && p.contains("fan  25%"));
    }
}
