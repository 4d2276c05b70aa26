//! The simulated board's kernel: what cpufreq, devfreq, CPU hotplug, the nvpmodel EMC
//! cap and the INA3221 drivers do when jpower writes or reads their attributes.
//!
//! It plugs into the file layer as a [`Driver`], so the code above it is the code that
//! runs on a Jetson. Per release (see `../shared/research/jetson-sysfs.md` section 10.4):
//! - **L4T 32 (kernel 4.9)**: a cpufreq or devfreq min above the current max, or a max
//!   below the current min, fails with `EINVAL` and changes nothing; values are stored as
//!   written (clamped to the hardware limits), only the running clock snaps to the table.
//! - **L4T 35/36 (5.10/5.15)**: min and max are PM-QoS requests that always succeed; the
//!   effective min is clamped to the effective max, and a raised max makes an earlier min
//!   request effective again. devfreq requests are kept in kHz (sub-kHz digits dropped).
//! - cpu0 cannot go offline (`EBUSY`); a fully offline cluster refuses limit writes
//!   (`EINVAL`); files whose mode has no write bit refuse writes even for root (in the
//!   file layer).
//! - INA3221 readings follow the running clocks, the online cores and the load through
//!   the physics model in [`super::power`], refresh only once per conversion cycle
//!   (`channels x samples x (bus + shunt conversion time)`, about 430 ms at NVIDIA's
//!   boot-time 512 samples; `samples` and `update_interval` are writable as on the
//!   mainline driver), carry conversion noise (one conversion: 1 % of the reading plus
//!   2 current LSBs, one sigma, divided by sqrt(samples) by the averaging) and are
//!   quantised to the chip's LSBs (8 mV bus, 40 uV shunt). Conversions end on a grid
//!   of the refresh interval: a change of clocks or load shows at the next boundary,
//!   never inside a cycle under way;
//! - every read of a rail file is I2C traffic: it holds the board's bus (400 kHz) for
//!   its register reads (120 us each: one per hwmon `in*`/`curr*` file, two for an IIO
//!   `in_power*`) while the reading thread sleeps, as the kernel's I2C driver blocks it;
//! - thermal zones heat with module power (30 °C + 0.6 °C/W, per-zone offsets).
//!
//! The board's state lives in its files and in `kernel.json` beside the tree (QoS
//! requests, load; the clocks still settling also in `settling.json`, which a read of a
//! running clock loads alone), under an exclusive `flock` for every write, so separate jpower
//! processes see one board. A file another process writes straight into the tree
//! (`echo`) is noticed at the model's next access and goes through the same rules as a
//! write through the model (`outside.rs`).
//!
//! [`Driver`]: crate::board::sysfs::Driver

mod clocks;
mod driver;
mod fault;
mod outside;
mod proc;
mod sensor;
mod state;

pub(crate) use clocks::pick;
pub use fault::Fault;
pub use sensor::InaConfig;
pub use state::{KernelState, LoadState};

use super::spec::BoardSpec;
use crate::board::sysfs::parse_u64;
use driver::Attr;
use fault::Faults;
use sensor::Sensor;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// The running EMC rate (BPMP debugfs), Hz.
const EMC_RATE: &str = "/sys/kernel/debug/bpmp/debug/clk/emc/rate";

/// The kernel model of one simulated board.
#[derive(Debug)]
pub struct SimKernel {
    spec: &'static BoardSpec,
    root: PathBuf,
    state_path: PathBuf,
    lock: File,
    attrs: Mutex<Vec<Attr>>,
    faults: Mutex<Faults>,
    sensor: Mutex<Sensor>,
    /// The INA3221s' I2C bus: one register read at a time.
    bus: Mutex<()>,
    /// This process's threads change the board one at a time (`exclusive`).
    writer: Mutex<()>,
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl SimKernel {
    /// The kernel of the board whose tree is `root`, state in `state_path`.
    pub fn new(spec: &'static BoardSpec, root: PathBuf, state_path: PathBuf, lock: File) -> Self {
        let fault = std::env::var("JPOWER_SIM_FAULT")
            .ok()
            .and_then(|v| Fault::parse(&v));
        SimKernel {
            spec,
            root,
            state_path,
            lock,
            attrs: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::new(fault)),
            sensor: Mutex::new(Sensor::default()),
            bus: Mutex::new(()),
            writer: Mutex::new(()),
        }
    }

    fn path(&self, board: &str) -> PathBuf {
        self.root.join(board.trim_start_matches('/'))
    }

    fn read(&self, board: &str) -> io::Result<u64> {
        let bytes = std::fs::read(self.path(board))?;
        parse_u64(&bytes).ok_or_else(einval)
    }

    /// Replaces a file's value in place, so descriptors opened on it stay valid and a
    /// concurrent reader always sees a whole first token. A read-only attribute (0444, as
    /// the kernel's `scaling_cur_freq`) is the kernel's to change: where this user may not
    /// open it, its owner-write bit is set for the open and cleared again (root, which CI
    /// runs as, ignores the mode; a review found every simulated switch of a non-root user
    /// failing on it).
    fn put(&self, board: &str, text: &str) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path(board);
        let open = || std::fs::OpenOptions::new().write(true).open(&path);
        let f = match open() {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                let mode = std::fs::metadata(&path)?.permissions().mode();
                if mode & 0o222 != 0 {
                    return Err(e);
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o200))?;
                let f = open();
                // The mode back whatever the open did: a failure to restore it is the
                // write's error only where the open failed too.
                let restored =
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
                let f = f?;
                restored?;
                f
            }
            r => r?,
        };
        let bytes = format!("{text}\n");
        f.write_at(bytes.as_bytes(), 0)?;
        f.set_len(bytes.len() as u64)
    }
}
