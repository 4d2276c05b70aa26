//! `jpower watch`'s live view: every half second a [`snapshot::Snapshot`] of the board
//! and the ring, drawn by [`view`] with `ratatui` on a terminal (the alternate screen in
//! raw mode, `q`, Esc or Ctrl-C to quit, the terminal restored on the way out) or printed
//! as plain rows when stdout is not a terminal.

mod snapshot;
mod view;

use crate::board::Board;
use crate::control::preset::Presets;
use crate::telemetry::ring::RingReader;
use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the view refreshes.
const REFRESH: Duration = Duration::from_millis(500);

/// What the view shows: the board (read, never written), its presets, and the ring
/// sampled at `requested_hz`.
pub struct Feed<'a> {
    /// The board, for its clocks, loads, memory and fan.
    pub board: &'a Board,
    /// Its presets, to name the mode.
    pub presets: Option<&'a Presets>,
    /// The telemetry ring.
    pub ring: &'a RingReader,
    /// The rate asked of the sampler.
    pub requested_hz: f64,
}

impl Feed<'_> {
    fn snapshot(&self, prev: &mut snapshot::Previous) -> snapshot::Snapshot {
        snapshot::gather(self.board, self.presets, self.ring, self.requested_hz, prev)
    }
}

/// Shows `feed` until `done()` says so or, on a terminal, the user quits.
pub fn run(feed: &Feed, done: &dyn Fn() -> bool) -> Result<()> {
    if std::io::stdout().is_terminal() {
        let mut terminal = ratatui::try_init()?;
        let shown = screen(&mut terminal, feed, done);
        ratatui::try_restore()?;
        shown
    } else {
        rows(feed, done);
        Ok(())
    }
}

/// The terminal UI: a redraw at every refresh and every resize.
fn screen(
    terminal: &mut ratatui::DefaultTerminal,
    feed: &Feed,
    done: &dyn Fn() -> bool,
) -> Result<()> {
    let mut prev = snapshot::Previous::now(feed.board, feed.ring);
    let mut shown = feed.snapshot(&mut prev);
    while !done() {
        terminal.draw(|f| view::draw(f, &shown))?;
        let next = Instant::now() + REFRESH;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            // Short polls, so a SIGTERM (`done`) is seen within a tenth of a second.
            if !event::poll(left.min(Duration::from_millis(100)))? {
                if done() {
                    return Ok(());
                }
                continue;
            }
            match event::read()? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(());
                    }
                }
                Event::Resize(..) => {
                    terminal.draw(|f| view::draw(f, &shown))?;
                }
                _ => {}
            }
        }
        shown = feed.snapshot(&mut prev);
    }
    Ok(())
}

/// Plain rows, one block per refresh, until `done()` or a closed stdout.
fn rows(feed: &Feed, done: &dyn Fn() -> bool) {
    let mut prev = snapshot::Previous::now(feed.board, feed.ring);
    while !done() {
        std::thread::sleep(REFRESH);
        let text = view::plain(&feed.snapshot(&mut prev));
        if std::io::stdout().write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}
