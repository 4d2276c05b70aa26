//! Writes a simulated board's presets as an nvpmodel configuration file, in NVIDIA's
//! format, so its presets reach jpower the way a real board's do: through
//! `/etc/nvpmodel.conf` and the same parser and importer.
//!
//! The file is generated from [`BoardSpec`] data, not copied from NVIDIA. It uses the
//! paths of the board's own layout and declares a TPC power-gating parameter where the
//! real file has one, so the importer's "skipped, needs a reboot" path is exercised.

use super::spec::BoardSpec;
use std::fmt::Write;

/// The whole file.
pub fn render(spec: &BoardSpec) -> String {
    let mut s = String::new();
    let cpu = "/sys/devices/system/cpu";
    let devfreq = format!("{}/devfreq/{}", spec.gpu.dir, spec.gpu.devfreq);
    let has_tpc = spec.presets.iter().any(|p| p.tpc_pg_mask.is_some());
    let _ = writeln!(
        s,
        "# nvpmodel configuration for the simulated {} ({}).",
        spec.model,
        spec.id()
    );
    let _ = writeln!(
        s,
        "# Written by jpower's simulator in NVIDIA's nvpmodel format.\n"
    );
    let _ = writeln!(s, "< PARAM TYPE=FILE NAME=CPU_ONLINE >");
    for c in 0..spec.cpus() {
        let _ = writeln!(s, "CORE_{c} {cpu}/cpu{c}/online");
    }
    if has_tpc {
        let _ = writeln!(s, "< PARAM TYPE=FILE NAME=TPC_POWER_GATING >");
        let _ = writeln!(s, "TPC_PG_MASK {}/tpc_pg_mask", spec.gpu.dir);
    }
    for (i, start) in spec.cluster_starts().into_iter().enumerate() {
        let _ = writeln!(s, "< PARAM TYPE=CLOCK NAME=CPU_{i} >");
        for (arg, file) in [
            ("FREQ_TABLE", "scaling_available_frequencies"),
            ("MAX_FREQ", "scaling_max_freq"),
            ("MIN_FREQ", "scaling_min_freq"),
        ] {
            let _ = writeln!(s, "{arg} {cpu}/cpu{start}/cpufreq/{file}");
        }
    }
    let _ = writeln!(s, "< PARAM TYPE=CLOCK NAME=GPU >");
    for (arg, file) in [
        ("FREQ_TABLE", "available_frequencies"),
        ("MAX_FREQ", "max_freq"),
        ("MIN_FREQ", "min_freq"),
    ] {
        let _ = writeln!(s, "{arg} {devfreq}/{file}");
    }
    let _ = writeln!(s, "< PARAM TYPE=CLOCK NAME=EMC >");
    let _ = writeln!(s, "MAX_FREQ {}\n", spec.emc.cap_file);

    for p in spec.presets {
        let _ = writeln!(s, "< POWER_MODEL ID={} NAME={} >", p.id, p.name);
        for c in 0..spec.cpus() {
            let _ = writeln!(s, "CPU_ONLINE CORE_{c} {}", u8::from(c < p.cores));
        }
        if let Some(mask) = p.tpc_pg_mask {
            let _ = writeln!(s, "TPC_POWER_GATING TPC_PG_MASK {mask}");
        }
        for (i, start) in spec.cluster_starts().into_iter().enumerate() {
            if start < p.cores {
                let _ = writeln!(s, "CPU_{i} MIN_FREQ {}", p.cpu_min_khz);
                let _ = writeln!(s, "CPU_{i} MAX_FREQ {}", p.cpu_max_khz);
            }
        }
        let _ = writeln!(s, "GPU MIN_FREQ {}", p.gpu_min_hz);
        let _ = writeln!(s, "GPU MAX_FREQ {}", p.gpu_max_hz);
        let _ = writeln!(s, "EMC MAX_FREQ {}\n", p.emc_max_hz);
    }
    let _ = writeln!(s, "< PM_CONFIG DEFAULT={} >", spec.default_preset);
    s
}
