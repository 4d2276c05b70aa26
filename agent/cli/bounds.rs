//! Argument values clap's own parsers leave unchecked: durations in seconds, fractions and
//! positive amounts, which must be finite numbers in range (`NaN`, `inf` and negative values parse as
//! `f64`), and counts that must not be 0.

/// The longest duration an option takes, seconds (about a year).
const MAX_SECONDS: f64 = 3.2e7;

/// A duration above 0 s, at most [`MAX_SECONDS`].
pub fn seconds(s: &str) -> Result<f64, String> {
    duration(s, false)
}

/// A duration of 0 s or more, at most [`MAX_SECONDS`].
pub fn seconds_or_zero(s: &str) -> Result<f64, String> {
    duration(s, true)
}

/// A count of 1 or more.
pub fn count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?}: must be a whole number, 1 or more")),
    }
}

pub use crate::predict::FIT_MODES;

/// A count of profiled modes to fit on: [`FIT_MODES`] or more.
pub fn fit_modes(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= FIT_MODES => Ok(n),
        _ => Err(format!(
            "{s:?}: must be a whole number, {FIT_MODES} or more (fewer modes fit a constant)"
        )),
    }
}

/// A CPU the sampler thread can be pinned to.
pub fn sampler_cpu(s: &str) -> Result<usize, String> {
    let cpu = s
        .parse::<usize>()
        .map_err(|_| format!("{s:?} is not a CPU number"))?;
    crate::telemetry::sampler::check_cpu(cpu).map(|()| cpu)
}

/// A finite number above 0 (watts, milliseconds, a rate).
pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?}: must be a finite number above 0")),
    }
}

/// A slowdown: a finite fraction, 0 or more (0.05: at most 5% slower; 1: twice as slow).
pub fn slowdown(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?}: must be a finite fraction, 0 or more")),
    }
}

/// A sampling rate the sampler takes, Hz: from the configuration's slowest (a sample
/// every ten seconds) to 100 kHz.
pub fn sample_rate(s: &str) -> Result<f64, String> {
    let low = crate::daemon::config::MIN_SAMPLE_RATE_HZ;
    match s.parse::<f64>() {
        Ok(v) if (low..=100_000.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: must be a rate from {low} to 100000 Hz")),
    }
}

/// An INA3221 averaging: `keep`, `auto`, or a count the chip takes.
pub fn averaging(s: &str) -> Result<String, String> {
    match s {
        "keep" | "auto" => Ok(s.to_string()),
        n => match n.parse::<u32>() {
            Ok(count) => crate::board::ina3221::check_samples(count).map(|_| s.to_string()),
            Err(_) => Err(format!(
                "{s:?}: keep, auto or a count (1, 4, 16, 64, 128, 256, 512, 1024)"
            )),
        },
    }
}

/// A percentile strictly between 0 and 100.
pub fn percentile(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 100.0 => Ok(v),
        _ => Err(format!("{s:?}: must be a number above 0 and below 100")),
    }
}

/// The slowest arrival rate `jpower schedule` plans for, requests per second: its simulated
/// runs span 2,000 requests each, an hour of simulated training per setting at 0.5 a
/// second (and a live run measures a rate over 2 s windows, one request a window).
pub const MIN_RATE_PER_S: f64 = 0.5;

/// A request rate of at least [`MIN_RATE_PER_S`].
pub fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= MIN_RATE_PER_S && v.is_finite() => Ok(v),
        _ => Err(format!(
            "{s:?}: must be a finite rate of at least {MIN_RATE_PER_S} requests per second"
        )),
    }
}

/// The slowest per-phase switch `jpower schedule` weighs, milliseconds: a switch slower
/// than a second is no per-minibatch switch (and each is simulated in 10 ms steps).
pub const MAX_SWITCH_MS: f64 = 1000.0;

/// A switch time from 0 to [`MAX_SWITCH_MS`] milliseconds.
pub fn switch_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=MAX_SWITCH_MS).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?}: must be a number of milliseconds from 0 to {MAX_SWITCH_MS}"
        )),
    }
}

/// A fraction in 0..1 (0 included).
pub fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s}: must be at least 0 and below 1"))
    }
}

fn duration(s: &str, zero: bool) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    let low = if zero { v >= 0.0 } else { v > 0.0 };
    if low && v <= MAX_SECONDS {
        Ok(v)
    } else {
        let least = if zero { "0 or more" } else { "above 0" };
        Err(format!(
            "{s} s: must be {least} and at most {MAX_SECONDS:e}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finite_durations_in_range_pass() {
        assert_eq!(seconds("1.5"), Ok(1.5));
        assert_eq!(seconds_or_zero("0"), Ok(0.0));
        for bad in ["0", "-1", "NaN", "inf", "1e30", "x"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        for bad in ["-0.1", "NaN", "-inf"] {
            assert!(seconds_or_zero(bad).is_err(), "{bad}");
        }
        assert_eq!(count("3"), Ok(3));
        assert!(count("0").is_err() && count("-1").is_err());
        assert_eq!(fraction("0.02"), Ok(0.02));
        for bad in ["1", "-0.1", "NaN"] {
            assert!(fraction(bad).is_err(), "{bad}");
        }
    }
}
