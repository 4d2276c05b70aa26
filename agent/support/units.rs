//! Frequencies as people write them and as sysfs stores them.
//!
//! The public API speaks hertz (`u64`, names ending in `_hz`). Sysfs speaks the unit of
//! each file: cpufreq files are in kHz, devfreq and the EMC cap in Hz. A value typed by a
//! user may carry a suffix (`1.3GHz`, `729.6MHz`, `2201600kHz`, `306000000Hz`); a bare
//! number is taken in the sysfs unit of the file it is meant for, so `--cpu-freq 2201600`
//! and `--gpu-freq 1300500000` mean what `cat` shows on the board.

use std::fmt;

/// The unit a sysfs attribute stores frequencies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreqUnit {
    /// cpufreq (`scaling_*_freq`, `scaling_available_frequencies`).
    KHz,
    /// devfreq and the nvpmodel EMC cap files.
    Hz,
}

impl FreqUnit {
    /// Hertz per unit.
    pub const fn hz(self) -> u64 {
        match self {
            FreqUnit::KHz => 1_000,
            FreqUnit::Hz => 1,
        }
    }
}

/// A frequency string that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid frequency {text:?}: {why} (examples: 1.3GHz, 729.6MHz, 2201600kHz, or a bare number in the file's unit)")]
pub struct FreqParseError {
    /// What the user wrote.
    pub text: String,
    /// Why it was refused.
    pub why: &'static str,
}

/// Parses `text` into hertz; a bare number is in `bare_unit`.
///
/// Decimal fractions are exact down to 1 Hz (`729.6MHz` is 729 600 000 Hz); a value that
/// is not a whole number of hertz is refused rather than rounded.
pub fn parse_freq(text: &str, bare_unit: FreqUnit) -> Result<u64, FreqParseError> {
    let err = |why| FreqParseError {
        text: text.to_string(),
        why,
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let scale: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" => bare_unit.hz(),
        "hz" => 1,
        "khz" | "k" => 1_000,
        "mhz" | "m" => 1_000_000,
        "ghz" | "g" => 1_000_000_000,
        _ => return Err(err("unknown unit suffix")),
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    if frac.contains('.') {
        return Err(err("more than one decimal point"));
    }
    let whole_v: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| err("not a number"))?
    };
    let mut value = whole_v.checked_mul(scale).ok_or_else(|| err("too large"))?;
    let mut unit = scale;
    for digit in frac.bytes() {
        let d = u64::from(digit - b'0');
        if unit % 10 != 0 {
            if d != 0 {
                return Err(err("finer than 1 Hz"));
            }
            continue;
        }
        unit /= 10;
        value = value
            .checked_add(d * unit)
            .ok_or_else(|| err("too large"))?;
    }
    Ok(value)
}

/// Displays hertz the way people read clocks: `2201.6 MHz`, `1.3005 GHz`, `204 MHz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freq(pub u64);

impl fmt::Display for Freq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hz = self.0;
        let (scale, name) = if hz >= 1_000_000 {
            (1_000_000, "MHz")
        } else if hz >= 1_000 {
            (1_000, "kHz")
        } else {
            (1, "Hz")
        };
        let whole = hz / scale;
        let mut frac = hz % scale;
        if frac == 0 {
            return write!(f, "{whole} {name}");
        }
        let mut digits = scale.ilog10() as usize;
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        write!(f, "{whole}.{frac:0digits$} {name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_exact() {
        assert_eq!(parse_freq("1.3GHz", FreqUnit::Hz), Ok(1_300_000_000));
        assert_eq!(parse_freq("729.6MHz", FreqUnit::Hz), Ok(729_600_000));
        assert_eq!(parse_freq("2201600kHz", FreqUnit::Hz), Ok(2_201_600_000));
        assert_eq!(parse_freq("1300.5 MHz", FreqUnit::KHz), Ok(1_300_500_000));
        assert_eq!(parse_freq("306000000Hz", FreqUnit::KHz), Ok(306_000_000));
    }

    #[test]
    fn bare_numbers_take_the_file_unit() {
        assert_eq!(parse_freq("2201600", FreqUnit::KHz), Ok(2_201_600_000));
        assert_eq!(parse_freq("1300500000", FreqUnit::Hz), Ok(1_300_500_000));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        for bad in [
            "",
            "GHz",
            "1.2.3MHz",
            "12x",
            "1.0000000001Hz",
            "99999999999999999999",
        ] {
            let e = parse_freq(bad, FreqUnit::Hz).unwrap_err();
            assert!(e.to_string().contains("invalid frequency"), "{bad}: {e}");
        }
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(Freq(2_201_600_000).to_string(), "2201.6 MHz");
        assert_eq!(Freq(1_300_500_000).to_string(), "1300.5 MHz");
        assert_eq!(Freq(204_000_000).to_string(), "204 MHz");
        assert_eq!(Freq(114_750_000).to_string(), "114.75 MHz");
    }
}
