//! `jpower watch`'s live view: every half second a [`snapshot::Snapshot`] of the board
//! and the ring, drawn by [`view`] with `ratatui` on a terminal (the alternate screen in
//! raw mode, `q`, Esc or Ctrl-C to quit, the terminal restored on the way out) or printed
//! as plain rows when stdout is not a terminal. It follows a ring the agent replaced and
//! ends at one it closed.

mod snapshot;
mod view;

use crate::board::Board;
use crate::control::preset::Presets;
use crate::telemetry::ring::{RingReader, WriterState};
use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the view refreshes.
const REFRESH: Duration = Duration::from_millis(500);

/// What the view shows: the board (read, never written), its presets, and the ring.
pub struct Feed<'a> {
    /// The board, for its clocks, loads, memory and fan.
    pub board: &'a Board,
    /// Its presets, to name the mode.
    pub presets: Option<&'a Presets>,
    /// The rate asked of the sampler writing a ring.
    pub requested_hz: &'a dyn Fn(&RingReader) -> f64,
}

/// The ring shown, and how to follow the ring that replaces it (true when it did: the
/// agent replaces its ring when another client changes the sensors' averaging).
pub struct Rings<'a> {
    /// The ring shown.
    pub ring: &'a mut RingReader,
    /// Moves `ring` to its replacement, if any.
    pub follow: &'a mut dyn FnMut(&mut RingReader) -> Result<bool>,
}

impl Rings<'_> {
    /// Follows a replaced ring (this refresh counts the new one's samples from its first);
    /// false once the ring's writer closed it (the agent stopped): the view ends.
    fn refresh(&mut self, prev: &mut snapshot::Previous) -> Result<bool> {
        if (self.follow)(self.ring)? {
            prev.follow(self.ring);
        }
        Ok(!self
            .ring
            .writer()
            .is_some_and(|l| l.state == WriterState::Closed))
    }
}

impl Feed<'_> {
    fn snapshot(&self, ring: &RingReader, prev: &mut snapshot::Previous) -> snapshot::Snapshot {
        let hz = (self.requested_hz)(ring);
        snapshot::gather(self.board, self.presets, ring, hz, prev)
    }
}

/// Shows `feed` from `rings` until `done()` says so, the ring is closed or, on a
/// terminal, the user quits.
pub fn run(feed: &Feed, rings: &mut Rings, done: &dyn Fn() -> bool) -> Result<()> {
    if std::io::stdout().is_terminal() {
        let mut terminal = ratatui::try_init()?;
        let shown = screen(&mut terminal, feed, rings, done);
        ratatui::try_restore()?;
        shown
    } else {
        rows(feed, rings, done)
    }
}

/// The terminal UI: a redraw at every refresh and every resize.
fn screen(
    terminal: &mut ratatui::DefaultTerminal,
    feed: &Feed,
    rings: &mut Rings,
    done: &dyn Fn() -> bool,
) -> Result<()> {
    let mut prev = snapshot::Previous::now(feed.board, rings.ring);
    let mut shown = feed.snapshot(rings.ring, &mut prev);
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
        if !rings.refresh(&mut prev)? {
            return Ok(());
        }
        shown = feed.snapshot(rings.ring, &mut prev);
    }
    Ok(())
}

/// Plain rows, one block per refresh, until `done()`, a closed ring or a closed stdout.
fn rows(feed: &Feed, rings: &mut Rings, done: &dyn Fn() -> bool) -> Result<()> {
    let mut prev = snapshot::Previous::now(feed.board, rings.ring);
    while !done() {
        std::thread::sleep(REFRESH);
        if !rings.refresh(&mut prev)? {
            break;
        }
        let text = view::plain(&feed.snapshot(rings.ring, &mut prev));
        if std::io::stdout().write_all(text.as_bytes()).is_err() {
            break;
        }
    }
    Ok(())
}
