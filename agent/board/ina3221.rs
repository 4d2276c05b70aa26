//! How fast each INA3221 rail can really refresh, and the averaging that reaches a rate.
//!
//! The chip converts every enabled channel in turn, averaging `samples` conversions of
//! bus and shunt voltage each: a new value appears every `channels x samples x (bus +
//! shunt conversion time)`. NVIDIA's boot script (nvpower.sh, L4T 35/36) sets
//! `samples = 512` with 140 us conversions: ~430 ms. The L4T 32 IIO driver runs the device
//! tree's fixed configuration (default 64 samples of 1.1 ms: ~422 ms) and exposes no knob.
//!
//! jpower assumes NVIDIA's 140 us conversion time on hwmon (the driver's `update_interval`
//! read-back does not include `samples` on patched kernels, so it cannot be told apart) and
//! writes `update_interval` itself whenever it changes `samples`. Lowering the averaging
//! raises the conversion noise and makes the INA3221 warning and critical alarms (which
//! compare each averaged value) noisier: jpower says so whenever it does it.

use crate::board::Values;
use crate::board::{Board, KnobKind};

/// The averaging counts the chip supports.
pub const SAMPLES: [u32; 8] = [1, 4, 16, 64, 128, 256, 512, 1024];
/// Bus + shunt conversion time NVIDIA programs, microseconds.
pub const CONVERSION_US: u32 = 2 * 140;
/// The L4T 32 IIO driver's default continuous configuration: 3 x 64 x (1.1 + 1.1) ms.
pub const IIO_REFRESH_US: u32 = 3 * 64 * 2200;
/// The INA3221s' I2C bus clock: the device tree's `clock-frequency` on every Jetson's
/// power-monitor bus, hertz.
pub const I2C_BUS_HZ: u64 = 400_000;
/// Bit times of one 16-bit register read: START, address + W, the register pointer,
/// repeated START, address + R, two data bytes, each byte with its ACK, and STOP.
pub const REGISTER_READ_BITS: u64 = 1 + 9 + 9 + 1 + 9 + 18 + 1;

/// How long one register read holds a bus clocked at `bus_hz`, nanoseconds (120 us at
/// 400 kHz). The reading thread blocks for it: every `in*_input`/`curr*_input` read of
/// the mainline hwmon driver is one such read (its regmap marks the shunt and bus
/// registers volatile, so nothing is cached), and the L4T 32 IIO driver's
/// `in_power*_input` is two (shunt, then bus voltage).
pub const fn register_read_ns(bus_hz: u64) -> u64 {
    REGISTER_READ_BITS * 1_000_000_000 / bus_hz
}

/// Register reads behind one reading of a rail, on either driver: the shunt and the bus
/// voltage registers (hwmon: `curr*_input` and `in*_input`, one each; L4T 32 IIO: both
/// behind `in_power*_input`).
pub const REGISTER_READS_PER_RAIL: u64 = 2;

/// What lowering the averaging costs, for every output that does it.
pub const NOISE_NOTE: &str = "lowering the INA3221 averaging raises its conversion noise and makes its warning/critical alarms noisier";

/// The refresh interval of chip `chip` with `samples` averaging (hwmon), microseconds.
pub fn refresh_us(board: &Board, chip: usize, values: &Values) -> u32 {
    let c = &board.ina[chip];
    if c.driver != "ina3221" {
        return IIO_REFRESH_US;
    }
    let samples = board
        .knob(KnobKind::InaSamples(chip))
        .map_or(512, |k| values[k] as u32);
    c.enabled.max(1) * samples.max(1) * CONVERSION_US
}

/// The largest averaging whose refresh fits in `period_us` with `channels` converting.
pub fn averaging_for(period_us: u32, channels: u32) -> u32 {
    SAMPLES
        .iter()
        .copied()
        .filter(|s| channels.max(1) * s * CONVERSION_US <= period_us)
        .max()
        .unwrap_or(1)
}

/// Knob values that set every hwmon chip to the averaging that reaches `period_us`
/// (`samples` and the matching `update_interval` in ms), starting from `current`.
pub fn averaging_target(board: &Board, current: &Values, period_us: u32) -> Values {
    with_averaging(board, current, |channels| {
        averaging_for(period_us, channels)
    })
}

/// Knob values that set every hwmon chip to average `samples` conversions (one of
/// [`SAMPLES`]), starting from `current`.
pub fn averaging_count_target(board: &Board, current: &Values, samples: u32) -> Values {
    with_averaging(board, current, |_| samples)
}

/// `current` with each hwmon chip averaging `samples(its enabled channels)` conversions.
fn with_averaging(board: &Board, current: &Values, samples: impl Fn(u32) -> u32) -> Values {
    let mut t = current.clone();
    for (i, chip) in board.ina.iter().enumerate() {
        let (Some(s), Some(u)) = (
            board.knob(KnobKind::InaSamples(i)),
            board.knob(KnobKind::InaUpdateInterval(i)),
        ) else {
            continue;
        };
        let samples = samples(chip.enabled);
        t[s] = u64::from(samples);
        t[u] = u64::from((chip.enabled.max(1) * samples * CONVERSION_US).div_ceil(1000));
    }
    t
}

/// Whether `samples` is an averaging the chip supports; the error says which are.
pub fn check_samples(samples: u32) -> Result<u32, String> {
    if SAMPLES.contains(&samples) {
        Ok(samples)
    } else {
        Err(format!(
            "averaging {samples}: the INA3221 averages 1, 4, 16, 64, 128, 256, 512 or 1024 samples"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averaging_reaches_the_rate() {
        assert_eq!(averaging_for(1000, 3), 1);
        assert_eq!(averaging_for(10_000, 3), 4);
        assert_eq!(averaging_for(500_000, 3), 512);
        assert_eq!(
            averaging_for(100, 3),
            1,
            "nothing faster than one conversion"
        );
    }
}
