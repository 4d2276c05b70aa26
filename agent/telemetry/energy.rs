//! Energy from timestamped samples: the trapezoid integral over any window, per rail and
//! for module power, with the sample count, the effective rate and an error bound; and
//! per-minibatch accounting through `begin`/`phase`/`end` markers, each minibatch split into
//! the spans between its phase markers (the protocol's phases: waiting for data, computing).

use super::ring::{RingReader, MAX_RAILS};
use super::Sample;
use serde::Serialize;
use std::collections::HashMap;

/// Energy over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Energy {
    /// Start of the window, `CLOCK_MONOTONIC` nanoseconds.
    pub start_ns: u64,
    /// End of the window, `CLOCK_MONOTONIC` nanoseconds.
    pub end_ns: u64,
    /// The window's length, seconds.
    pub duration_s: f64,
    /// Samples inside the window.
    pub samples: usize,
    /// Samples per second inside the window.
    pub rate_hz: f64,
    /// Module energy over the window, joules.
    pub module_j: f64,
    /// Mean module power over the window, watts.
    pub mean_module_w: f64,
    /// Per rail, in the ring's rail order.
    pub rails_j: heapless::Vec<f64, MAX_RAILS>,
    /// Per rail, the time of the window over which its reads failed and its last good
    /// value was held instead of a reading, seconds ([`Sample::failed`]).
    pub failed_s: heapless::Vec<f64, MAX_RAILS>,
    /// How far off the module energy can be because the sensor holds each value for its
    /// refresh interval: one interval of the window's power swing at each end.
    pub error_bound_j: f64,
    /// The least and the greatest module power seen, watts (the bound's swing; `None`
    /// without a sample).
    #[serde(skip)]
    pub swing_w: Option<(f64, f64)>,
    /// The times of the oldest and the newest sample inside the window (`None` without
    /// one): a sample on the seam of two joined windows counts once.
    #[serde(skip)]
    pub sampled_ns: Option<(u64, u64)>,
}

impl Energy {
    /// This window and `next`, which begins where this one ends, as one window: what a
    /// reader integrating a window longer than the ring holds adds up, part by part,
    /// before the ring overwrites them. `refresh_s` as for [`integrate`].
    pub fn join(&self, next: &Energy, refresh_s: f64) -> Energy {
        let mut e = self.clone();
        e.end_ns = next.end_ns;
        e.duration_s += next.duration_s;
        // Parts meet at a sample (a reader integrates up to its newest one, then on from
        // it): inside both windows, it counts once.
        let seam = match (self.sampled_ns, next.sampled_ns) {
            (Some((_, newest)), Some((oldest, _))) => usize::from(newest == oldest),
            _ => 0,
        };
        e.samples += next.samples - seam;
        e.sampled_ns = match (self.sampled_ns, next.sampled_ns) {
            (Some((oldest, _)), Some((_, newest))) => Some((oldest, newest)),
            (a, b) => a.or(b),
        };
        e.module_j += next.module_j;
        for (a, b) in e.rails_j.iter_mut().zip(&next.rails_j) {
            *a += b;
        }
        for (a, b) in e.failed_s.iter_mut().zip(&next.failed_s) {
            *a += b;
        }
        e.swing_w = match (self.swing_w, next.swing_w) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        };
        if e.duration_s > 0.0 {
            e.rate_hz = e.samples as f64 / e.duration_s;
            e.mean_module_w = e.module_j / e.duration_s;
        }
        e.error_bound_j = e
            .swing_w
            .map_or(0.0, |(lo, hi)| 2.0 * refresh_s * (hi - lo));
        e
    }
}

/// Integrates `samples` (oldest first) over `[t0, t1]`, interpolating at the edges and
/// holding the first and last values where the samples do not cover the window.
/// `refresh_s` is the slowest rail's refresh interval.
pub fn integrate(samples: &[Sample], t0: u64, t1: u64, refresh_s: f64) -> Energy {
    let (bounds, mut whole) = ([t0, t1], [0.0]);
    let rails = samples.first().map_or(0, |s| s.rail_count);
    let mut i = Integrator::new(&bounds, &mut whole, rails);
    samples.iter().rev().for_each(|s| i.push(s));
    i.finish(refresh_s)
}

/// The trapezoid integral over `bounds[0]..=bounds[last]` in one pass over samples fed
/// newest first (as the ring yields them), without collecting them; the module energy
/// is also split over the windows between consecutive bounds (a minibatch's phase spans).
/// Sums do not depend on the order, and each segment is linear, so the windows' parts add
/// up to the whole.
struct Integrator<'a> {
    bounds: &'a [u64],
    parts: &'a mut [f64],
    e: Energy,
    /// The least and the greatest module power seen, watts (the error bound's swing).
    swing: (f64, f64),
    /// The newest sample fed: the last in time.
    newest: Option<Sample>,
    /// The sample fed before this one: after the last `push`, the oldest.
    newer: Option<Sample>,
}

impl<'a> Integrator<'a> {
    /// An empty integral over `bounds` (ascending, at least two), `parts` one per window
    /// between them, of `rails` rails.
    fn new(bounds: &'a [u64], parts: &'a mut [f64], rails: usize) -> Integrator<'a> {
        let (t0, t1) = (bounds[0], bounds[bounds.len() - 1]);
        parts.fill(0.0);
        Integrator {
            bounds,
            parts,
            e: Energy {
                start_ns: t0,
                end_ns: t1,
                duration_s: t1.saturating_sub(t0) as f64 * 1e-9,
                samples: 0,
                rate_hz: 0.0,
                module_j: 0.0,
                mean_module_w: 0.0,
                rails_j: std::iter::repeat_n(0.0, rails.min(MAX_RAILS)).collect(),
                failed_s: std::iter::repeat_n(0.0, rails.min(MAX_RAILS)).collect(),
                error_bound_j: 0.0,
                swing_w: None,
                sampled_ns: None,
            },
            swing: (f64::MAX, f64::MIN),
            newest: None,
            newer: None,
        }
    }

    /// Feeds the next older sample.
    fn push(&mut self, a: &Sample) {
        match self.newer {
            Some(b) => self.segment(a, &b),
            None => self.newest = Some(*a),
        }
        if (self.e.start_ns..=self.e.end_ns).contains(&a.t_ns) {
            self.e.samples += 1;
            // Fed newest first: the first inside is the newest, each later one older.
            let newest = self.e.sampled_ns.map_or(a.t_ns, |(_, n)| n);
            self.e.sampled_ns = Some((a.t_ns, newest));
        }
        self.newer = Some(*a);
    }

    /// The segment from `a` to the next sample `b`, clipped to the window.
    fn segment(&mut self, a: &Sample, b: &Sample) {
        let (ta, tb) = (a.t_ns.max(self.e.start_ns), b.t_ns.min(self.e.end_ns));
        if tb <= ta || b.t_ns <= a.t_ns {
            return;
        }
        // Power at time t on the segment a..b, linearly interpolated.
        let at = |pa: u32, pb: u32, t: u64| {
            let f = (t - a.t_ns) as f64 / (b.t_ns - a.t_ns) as f64;
            (f64::from(pa) + f * (f64::from(pb) - f64::from(pa))) * 1e-6
        };
        let dt = (tb - ta) as f64 * 1e-9;
        let trap = |pa: u32, pb: u32| 0.5 * (at(pa, pb, ta) + at(pa, pb, tb)) * dt;
        self.e.module_j += trap(a.module_uw, b.module_uw);
        for (r, j) in self.e.rails_j.iter_mut().enumerate() {
            *j += trap(a.rails[r].power_uw, b.rails[r].power_uw);
        }
        self.failing(a.failed() | b.failed(), dt);
        for p in [a.module_uw, b.module_uw] {
            self.widen(f64::from(p) * 1e-6);
        }
        self.spread(ta, tb, |t| at(a.module_uw, b.module_uw, t));
    }

    /// Holds `s`'s values from `from` to `to` (before the first and after the last
    /// sample the sensor holds its value).
    fn hold(&mut self, s: &Sample, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let dt = (to - from) as f64 * 1e-9;
        let w = f64::from(s.module_uw) * 1e-6;
        self.e.module_j += w * dt;
        for (r, j) in self.e.rails_j.iter_mut().enumerate() {
            *j += f64::from(s.rails[r].power_uw) * 1e-6 * dt;
        }
        self.failing(s.failed(), dt);
        self.spread(from, to, |_| w);
    }

    /// Counts `dt` seconds against each rail of mask `failed`.
    fn failing(&mut self, failed: u32, dt: f64) {
        for (r, f) in self.e.failed_s.iter_mut().enumerate() {
            if failed & 1 << r != 0 {
                *f += dt;
            }
        }
    }

    /// Adds the trapezoid of the linear power `p` over `[u, v]` to each window it meets.
    fn spread(&mut self, u: u64, v: u64, p: impl Fn(u64) -> f64) {
        let first = self.bounds.partition_point(|&b| b <= u).saturating_sub(1);
        for (i, part) in self.parts.iter_mut().enumerate().skip(first) {
            let (lo, hi) = (self.bounds[i].max(u), self.bounds[i + 1].min(v));
            if self.bounds[i] >= v {
                break;
            }
            if hi > lo {
                *part += 0.5 * (p(lo) + p(hi)) * (hi - lo) as f64 * 1e-9;
            }
        }
    }

    fn widen(&mut self, w: f64) {
        self.swing = (self.swing.0.min(w), self.swing.1.max(w));
    }

    /// The integral, with the holds at both ends; `refresh_s` is the slowest rail's
    /// refresh interval.
    fn finish(mut self, refresh_s: f64) -> Energy {
        let (t0, t1) = (self.e.start_ns, self.e.end_ns);
        if let (Some(first), Some(last)) = (self.newer, self.newest) {
            self.hold(&first, t0, first.t_ns.min(t1));
            self.hold(&last, last.t_ns.max(t0), t1);
            self.widen(f64::from(first.module_uw) * 1e-6);
        }
        let mut e = self.e;
        if e.duration_s > 0.0 {
            e.rate_hz = e.samples as f64 / e.duration_s;
            e.mean_module_w = e.module_j / e.duration_s;
        }
        let (lo, hi) = self.swing;
        if hi >= lo {
            e.error_bound_j = 2.0 * refresh_s * (hi - lo);
            e.swing_w = Some((lo, hi));
        }
        e
    }
}

impl RingReader {
    /// Energy between two `CLOCK_MONOTONIC` times (samples still in the ring): the samples
    /// inside, the last one at or before `t0` however old (the sensor holds its value: a
    /// sampler that fell behind by more than a period must not leave the window empty),
    /// and those up to two periods after `t1`.
    pub fn energy(&self, t0: u64, t1: u64) -> Energy {
        self.energy_split(&[t0, t1], &mut [0.0])
    }

    /// [`RingReader::energy`] over `bounds[0]..=bounds[last]` (ascending, at least two),
    /// and in `parts` the module energy of each window between consecutive bounds, joules:
    /// one pass over the ring, nothing allocated.
    pub fn energy_split(&self, bounds: &[u64], parts: &mut [f64]) -> Energy {
        let (t0, t1) = (bounds[0], bounds[bounds.len() - 1]);
        let margin = self.info.period_ns.saturating_mul(2);
        let mut i = Integrator::new(bounds, parts, self.info.rails.len());
        for s in self.newest_since(0) {
            if s.t_ns <= t1.saturating_add(margin) {
                i.push(&s);
            }
            if s.t_ns <= t0 {
                break;
            }
        }
        i.finish(self.info.slowest_refresh_s())
    }
}

/// One finished minibatch of workload kind `K` (the protocol's: training or inference).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Minibatch<K> {
    /// Training or inference.
    pub kind: K,
    /// The minibatch's number, as the client gave it.
    pub id: u64,
    /// Time from the begin marker to the end marker, seconds.
    pub duration_s: f64,
    /// Mean module power between the markers, watts.
    pub mean_w: f64,
    /// Module energy between the markers, joules.
    pub energy_j: f64,
    /// Samples between the markers.
    pub samples: usize,
    /// Bound on the energy's error, joules (see [`Energy::error_bound_j`]).
    pub error_bound_j: f64,
}

/// Marker errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError<K: std::fmt::Display> {
    /// `end` of a minibatch that is not open.
    #[error("{kind} minibatch {id} was never begun")]
    NotBegun {
        /// The minibatch's kind.
        kind: K,
        /// The minibatch's number.
        id: u64,
    },
    /// `begin` of a minibatch that is already open.
    #[error("{kind} minibatch {id} is already open")]
    AlreadyOpen {
        /// The minibatch's kind.
        kind: K,
        /// The minibatch's number.
        id: u64,
    },
    /// `begin` with [`MAX_OPEN`] minibatches open already.
    #[error("{MAX_OPEN} minibatches are open already: end some first")]
    TooMany,
    /// A phase marker beyond [`MAX_SPANS`] spans of one minibatch.
    #[error("{kind} minibatch {id} has {MAX_SPANS} phase spans already: end it first")]
    TooManySpans {
        /// The minibatch's kind.
        kind: K,
        /// The minibatch's number.
        id: u64,
    },
}

/// The most spans (phase changes plus one) one minibatch may have: a peer cannot grow
/// an open minibatch without bound either.
pub const MAX_SPANS: usize = 256;

/// The time one minibatch spent in one phase between two markers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span<P> {
    /// The phase (the protocol's: fetch or compute).
    pub phase: P,
    /// The span's length, seconds.
    pub duration_s: f64,
    /// Module energy over the span, joules.
    pub energy_j: f64,
}

/// A minibatch ended: the whole of it, and its spans in order (kept until the next end).
pub type Ended<'a, K, P> = (Minibatch<K>, &'a [Span<P>]);

/// An open minibatch: the times at which it entered each of its phases, oldest first.
#[derive(Debug)]
struct Open<P> {
    entered: Vec<(u64, P)>,
}

/// The most minibatches one connection may have open at once: a peer cannot grow the
/// agent without bound by beginning minibatches it never ends.
pub const MAX_OPEN: usize = 1024;

/// The most emptied phase lists [`Minibatches`] keeps: a trainer and an inference server
/// each have one or two minibatches open at a time.
pub const SPARE_LISTS: usize = 16;

/// Open minibatches, by kind and id, each in a phase of type `P`.
///
/// Markers are a socket round trip each, every minibatch: once the lists in use have
/// grown to what the client needs, they allocate nothing. An ended minibatch's phase list
/// is kept for the next one to begin, and the spans of the last one ended are kept in one
/// list that the next end reuses.
#[derive(Debug)]
pub struct Minibatches<K, P> {
    open: HashMap<(K, u64), Open<P>>,
    /// Phase lists of ended minibatches, emptied, for the next ones to begin (at most
    /// [`SPARE_LISTS`]: a burst of open minibatches is not kept for the connection's life).
    spare: Vec<Vec<(u64, P)>>,
    /// The spans of the minibatch ended last.
    spans: Vec<Span<P>>,
}

impl<K, P> Default for Minibatches<K, P> {
    fn default() -> Self {
        Minibatches {
            open: HashMap::new(),
            spare: Vec::new(),
            spans: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash + std::fmt::Display, P: Copy> Minibatches<K, P> {
    /// Marks the start of minibatch `id` at `t_ns`, in `phase`.
    pub fn begin(&mut self, kind: K, id: u64, phase: P, t_ns: u64) -> Result<(), MarkerError<K>> {
        if self.open.contains_key(&(kind, id)) {
            return Err(MarkerError::AlreadyOpen { kind, id });
        }
        if self.open.len() >= MAX_OPEN {
            return Err(MarkerError::TooMany);
        }
        let mut entered = self.spare.pop().unwrap_or_default();
        entered.push((t_ns, phase));
        self.open.insert((kind, id), Open { entered });
        Ok(())
    }

    /// Marks that open minibatch `id` enters `phase` at `t_ns`.
    pub fn phase(&mut self, kind: K, id: u64, phase: P, t_ns: u64) -> Result<(), MarkerError<K>> {
        let open = self
            .open
            .get_mut(&(kind, id))
            .ok_or(MarkerError::NotBegun { kind, id })?;
        if open.entered.len() >= MAX_SPANS {
            return Err(MarkerError::TooManySpans { kind, id });
        }
        open.entered.push((t_ns, phase));
        Ok(())
    }

    /// Marks its end at `t_ns` and accounts it from the ring: the whole minibatch, and
    /// each span between its markers (in order; one span when it had no phase marker).
    pub fn end(
        &mut self,
        kind: K,
        id: u64,
        t_ns: u64,
        ring: &RingReader,
    ) -> Result<Ended<'_, K, P>, MarkerError<K>> {
        let mut open = self
            .open
            .remove(&(kind, id))
            .ok_or(MarkerError::NotBegun { kind, id })?;
        // Its spans' bounds, never decreasing, then one pass over the ring for them all.
        let n = open.entered.len();
        let mut bounds = [0u64; MAX_SPANS + 1];
        let mut parts = [0f64; MAX_SPANS];
        let mut last = open.entered[0].0;
        for (b, t) in bounds
            .iter_mut()
            .zip(open.entered.iter().map(|&(t, _)| t).chain([t_ns]))
        {
            last = last.max(t);
            *b = last;
        }
        let e = ring.energy_split(&bounds[..=n], &mut parts[..n]);
        self.spans.clear();
        self.spans
            .extend(open.entered.iter().zip(bounds.windows(2)).zip(&parts).map(
                |((&(_, phase), w), &energy_j)| Span {
                    phase,
                    duration_s: (w[1] - w[0]) as f64 * 1e-9,
                    energy_j,
                },
            ));
        if self.spare.len() < SPARE_LISTS {
            open.entered.clear();
            self.spare.push(open.entered);
        }
        let minibatch = Minibatch {
            kind,
            id,
            duration_s: e.duration_s,
            mean_w: e.mean_module_w,
            energy_j: e.module_j,
            samples: e.samples,
            error_bound_j: e.error_bound_j,
        };
        Ok((minibatch, &self.spans))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_cannot_open_minibatches_without_bound() {
        let mut m = Minibatches::default();
        for id in 0..MAX_OPEN as u64 {
            m.begin("train", id, (), 0).unwrap();
        }
        assert_eq!(m.begin("train", u64::MAX, (), 0), Err(MarkerError::TooMany));
        assert_eq!(m.open.len(), MAX_OPEN);
    }

    fn s(t_ms: u64, w: f64) -> Sample {
        let mut s = Sample {
            t_ns: t_ms * 1_000_000,
            module_uw: (w * 1e6) as u32,
            rail_count: 1,
            ..Sample::default()
        };
        s.rails[0].power_uw = s.module_uw;
        s
    }

    #[test]
    fn trapezoid_of_a_ramp_is_exact() {
        let samples: Vec<Sample> = (0..=1000).map(|i| s(i, i as f64 / 100.0)).collect();
        let e = integrate(&samples, 0, 1_000_000_000, 0.0);
        assert!((e.module_j - 5.0).abs() < 1e-6, "{}", e.module_j);
        assert!((e.rails_j[0] - 5.0).abs() < 1e-6);
        assert_eq!(e.samples, 1001);
        assert!((e.mean_module_w - 5.0).abs() < 1e-6);
    }

    #[test]
    fn windows_are_clipped_by_interpolation() {
        let samples = vec![s(0, 10.0), s(1000, 10.0)];
        let e = integrate(&samples, 250_000_000, 750_000_000, 0.0);
        assert!((e.module_j - 5.0).abs() < 1e-9, "{}", e.module_j);
    }

    #[test]
    fn minibatch_markers_account_each_minibatch() {
        use crate::telemetry::ring::{RingInfo, RingWriter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        let w = RingWriter::create(&path, &RingInfo::for_test(&["R"], 4096), None).unwrap();
        // 10 W for 1 s, then 20 W for 1 s, at 1 kHz.
        for n in 0..=2000u64 {
            w.publish(n, &s(n, if n < 1000 { 10.0 } else { 20.0 }));
        }
        let ring = RingReader::open(&path).unwrap();
        let mut m = Minibatches::default();
        m.begin("train", 1, "fetch", 0).unwrap();
        assert_eq!(
            m.begin("train", 1, "fetch", 0),
            Err(MarkerError::AlreadyOpen {
                kind: "train",
                id: 1
            })
        );
        m.begin("infer", 1, "fetch", 1_500_000_000).unwrap();
        m.phase("train", 1, "compute", 800_000_000).unwrap();
        let (train, spans) = m.end("train", 1, 1_200_000_000, &ring).unwrap();
        assert!((train.energy_j - 14.0).abs() < 0.02, "{train:?}");
        assert!((train.duration_s - 1.2).abs() < 1e-9);
        // 0.8 s of fetching at 10 W, then 0.2 s at 10 W and 0.2 s at 20 W of computing.
        assert_eq!(spans.len(), 2);
        assert_eq!((spans[0].phase, spans[1].phase), ("fetch", "compute"));
        assert!((spans[0].duration_s - 0.8).abs() < 1e-9, "{spans:?}");
        assert!((spans[0].energy_j - 8.0).abs() < 0.02, "{spans:?}");
        assert!((spans[1].energy_j - 6.0).abs() < 0.02, "{spans:?}");
        // One pass splits the whole: the spans add up to it.
        let sum: f64 = spans.iter().map(|s| s.energy_j).sum();
        assert!((sum - train.energy_j).abs() < 1e-9, "{sum} {train:?}");
        let (infer, spans) = m.end("infer", 1, 2_000_000_000, &ring).unwrap();
        assert!((infer.energy_j - 10.0).abs() < 0.01, "{infer:?}");
        assert_eq!(spans.len(), 1, "no phase marker: one span");
        assert!((spans[0].energy_j - infer.energy_j).abs() < 1e-9);
        assert_eq!(
            m.end("infer", 1, 0, &ring).map(|_| ()),
            Err(MarkerError::NotBegun {
                kind: "infer",
                id: 1
            })
        );
        assert_eq!(
            m.phase("infer", 1, "compute", 0),
            Err(MarkerError::NotBegun {
                kind: "infer",
                id: 1
            })
        );
    }

    #[test]
    fn a_split_window_adds_up_and_holds_at_both_ends() {
        // Samples cover only 0.2..0.8 s of a 0..1 s window: 10 W held before, a ramp to
        // 20 W, 20 W held after; the windows split it anywhere, between samples too.
        let samples = vec![s(200, 10.0), s(500, 10.0), s(800, 20.0)];
        let bounds = [
            0,
            100_000_000,
            350_000_000,
            650_000_000,
            650_000_000,
            1_000_000_000,
        ];
        let mut parts = [0.0; 5];
        let mut i = Integrator::new(&bounds, &mut parts, 1);
        samples.iter().rev().for_each(|s| i.push(s));
        let whole = i.finish(0.0);
        let want = [
            1.0,
            2.5,
            10.0 * 0.15 + 0.15 * (10.0 + 15.0) / 2.0,
            0.0,
            0.15 * (15.0 + 20.0) / 2.0 + 20.0 * 0.2,
        ];
        for (got, want) in parts.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{parts:?}");
        }
        assert!((parts.iter().sum::<f64>() - whole.module_j).abs() < 1e-9);
        assert!(
            (whole.module_j - integrate(&samples, 0, 1_000_000_000, 0.0).module_j).abs() < 1e-12
        );
        assert_eq!(whole.samples, 3);
    }

    #[test]
    fn a_minibatch_cannot_collect_phase_spans_without_bound() {
        let mut m = Minibatches::default();
        m.begin("train", 1, 0u8, 0).unwrap();
        for t in 1..MAX_SPANS as u64 {
            m.phase("train", 1, (t % 2) as u8, t).unwrap();
        }
        assert_eq!(
            m.phase("train", 1, 0, u64::MAX),
            Err(MarkerError::TooManySpans {
                kind: "train",
                id: 1
            })
        );
    }

    /// After the first minibatch, the next ones begin on its phase list and end into
    /// its span list: the same memory, nothing allocated.
    #[test]
    fn markers_reuse_their_lists() {
        use crate::telemetry::ring::{RingInfo, RingWriter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        let w = RingWriter::create(&path, &RingInfo::for_test(&["R"], 64), None).unwrap();
        w.publish(0, &s(0, 10.0));
        w.publish(1, &s(1000, 10.0));
        let ring = RingReader::open(&path).unwrap();
        let mut m = Minibatches::default();
        let mut seen = None;
        for id in 0..4u64 {
            m.begin("train", id, 0u8, 0).unwrap();
            for t in 1..8 {
                m.phase("train", id, (t % 2) as u8, t).unwrap();
            }
            let entered = m.open[&("train", id)].entered.as_ptr();
            let (_, spans) = m.end("train", id, 1_000_000_000, &ring).unwrap();
            assert_eq!(spans.len(), 8);
            let now = (entered, spans.as_ptr());
            assert!(
                seen.is_none_or(|s| s == now),
                "minibatch {id} moved its lists"
            );
            seen = Some(now);
            assert_eq!(m.spare.len(), 1);
        }
    }

    /// A window integrated in two parts that meet at a sample, joined, is the window
    /// integrated whole (what `energy` does for a command longer than the ring holds).
    #[test]
    fn two_parts_joined_are_the_whole() {
        let samples: Vec<Sample> = (0..=20)
            .map(|i| s(i * 100, 5.0 + f64::from(i as u32 % 7)))
            .collect();
        let whole = integrate(&samples, 50_000_000, 1_950_000_000, 0.1);
        let first = integrate(&samples, 50_000_000, 1_000_000_000, 0.1);
        let second = integrate(&samples, 1_000_000_000, 1_950_000_000, 0.1);
        let joined = first.join(&second, 0.1);
        assert!(
            (joined.module_j - whole.module_j).abs() < 1e-9,
            "{joined:?} {whole:?}"
        );
        assert!((joined.duration_s - whole.duration_s).abs() < 1e-12);
        assert!((joined.error_bound_j - whole.error_bound_j).abs() < 1e-9);
        // The sample on the seam (at 1 s) counts once (found by review: twice, so a long
        // `energy` reported more samples, and a higher rate, than fit its duration).
        assert_eq!(joined.samples, whole.samples);
        assert_eq!(joined.sampled_ns, whole.sampled_ns);
        assert_eq!(
            (joined.start_ns, joined.end_ns),
            (whole.start_ns, whole.end_ns)
        );
        for (j, w) in joined.rails_j.iter().zip(&whole.rails_j) {
            assert!((j - w).abs() < 1e-9);
        }
    }

    #[test]
    fn the_error_bound_grows_with_refresh_and_swing() {
        let samples = vec![s(0, 5.0), s(500, 15.0), s(1000, 5.0)];
        let e = integrate(&samples, 0, 1_000_000_000, 0.43);
        assert!((e.error_bound_j - 2.0 * 0.43 * 10.0).abs() < 1e-9);
    }
}
