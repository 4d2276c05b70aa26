//! The agent's configuration file (`/etc/jpower/jpower.toml`, or `--config FILE`).
//!
//! Every key is optional and documented in the README with its default. An unknown key
//! or a bad value is an error naming the file and the line.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The default configuration file.
pub const DEFAULT_PATH: &str = "/etc/jpower/jpower.toml";

/// Which total the budget applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BudgetTotal {
    /// Module power (the input rail where there is one, else the module rails).
    #[default]
    Module,
    /// The input rail (boards with one).
    Input,
}

/// The configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The socket path (default: `<runtime_dir>/jpower.sock`).
    pub socket: Option<PathBuf>,
    /// The socket's mode, octal.
    pub socket_mode: String,
    /// The group that may connect and read (the socket's group).
    pub read_group: String,
    /// The group that may control (set modes, budgets); root always may.
    pub control_group: String,
    /// The runtime directory [default: see the README].
    pub runtime_dir: Option<PathBuf>,
    /// Samples per second [default: the lower of 1 kHz and the sensors' refresh].
    pub sample_rate_hz: Option<f64>,
    /// `keep`, `auto` or an averaging count (a number, or a string of one).
    #[serde(deserialize_with = "word_or_count")]
    pub sensor_averaging: String,
    /// Sampler thread SCHED_FIFO priority and CPU.
    pub rt_priority: Option<i32>,
    /// CPU the sampler thread is pinned to [default: none].
    pub sampler_cpu: Option<usize>,
    /// Activity counter records per second into the ring (0: none) [default: 50].
    pub activity_rate_hz: f64,
    /// The window activity utilisations and rates are taken over, ms [default: 200].
    pub activity_window_ms: u64,
    /// Power budget, watts.
    pub budget_w: Option<f64>,
    /// Which total the budget applies to (`module` or `input`).
    pub budget_total: BudgetTotal,
    /// Moving-average window of the budget guard, milliseconds.
    pub budget_window_ms: u64,
    /// How far under the budget the guard must be before it lifts a cap, watts.
    pub budget_hysteresis_w: f64,
    /// Session lease expiry without renewal, milliseconds (0: none).
    pub lease_timeout_ms: u64,
    /// Most clients connected at once.
    pub max_clients: usize,
    /// A connection without a request for this long is closed, unless it holds the lease
    /// or a subscription streams to it, milliseconds (0: never).
    pub idle_timeout_ms: u64,
    /// A preset applied at start (a mode that survives reboots).
    pub default_mode: Option<String>,
    /// Whether restoring after a lease overwrites changes made behind jpower's back.
    pub restore_overrides_external: bool,
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`) [default: nowhere].
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// A node_exporter textfile-collector file (`*.prom`) rewritten atomically every
    /// `metrics_textfile_interval_ms` [default: none].
    pub metrics_textfile: Option<PathBuf>,
    /// How often the metrics textfile is rewritten, milliseconds.
    pub metrics_textfile_interval_ms: u64,
    /// The file this configuration was read from (`None`: the defaults), so that errors
    /// found later, against the board, can still name the file and the line.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: None,
            socket_mode: "0660".into(),
            read_group: "jpower".into(),
            control_group: "jpower".into(),
            runtime_dir: None,
            sample_rate_hz: None,
            sensor_averaging: "keep".into(),
            rt_priority: None,
            sampler_cpu: None,
            activity_rate_hz: 50.0,
            activity_window_ms: 200,
            budget_w: None,
            budget_total: BudgetTotal::Module,
            budget_window_ms: 1000,
            budget_hysteresis_w: 1.0,
            lease_timeout_ms: 0,
            max_clients: 64,
            idle_timeout_ms: 300_000,
            default_mode: None,
            restore_overrides_external: false,
            metrics_listen: None,
            metrics_textfile: None,
            metrics_textfile_interval_ms: 15_000,
            file: None,
        }
    }
}

/// A toml/serde message as a configuration's reader wants it: on one line (toml's may run
/// over several: "invalid array\nexpected `]`"), led by the `key` whose value it is about,
/// with TOML's words for serde's Rust types (`expected usize`: an integer).
fn readable(message: &str, key: Option<&str>) -> String {
    let mut m = message.trim().lines().collect::<Vec<_>>().join("; ");
    for (rust, toml) in [
        ("usize", "a nonnegative integer"),
        ("u64", "a nonnegative integer"),
        ("u32", "a nonnegative integer"),
        ("u16", "a nonnegative integer"),
        ("u8", "a nonnegative integer"),
        ("i64", "an integer"),
        ("i32", "an integer"),
        ("f64", "a number"),
        ("f32", "a number"),
        ("a string", "a string (in quotes)"),
    ] {
        m = m.replace(&format!("expected {rust}"), &format!("expected {toml}"));
    }
    if m.contains("invalid socket address syntax") {
        m = "expected an IP address and port in quotes, such as \"127.0.0.1:9102\" (not a host name)".into();
    }
    match key {
        Some(k) if !m.contains(&format!("`{k}`")) && !m.contains(&format!("{k}:")) => {
            format!("{k}: {m}")
        }
        _ => m,
    }
}

/// The top-level keys of `text` with their spans and their values' spans, where it is TOML.
type SpannedKeys = std::collections::BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;

/// The line of `text` (from 1) that sets the top-level `key`, if one does: from the TOML
/// parser's spans, so a quoted key, or `key = ` inside a multi-line string, is no mistake.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let keys: SpannedKeys = toml::from_str(text).ok()?;
    let at = keys.keys().find(|k| k.get_ref() == key)?.span().start;
    Some(text[..at].matches('\n').count() + 1)
}

/// The top-level key whose value holds byte `offset` of `text` (where a type error points),
/// if the text is TOML.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let keys: SpannedKeys = toml::from_str(text).ok()?;
    keys.into_iter()
        .find(|(_, value)| value.span().contains(&offset))
        .map(|(key, _)| key.into_inner())
}

/// The slowest activity rate, Hz: a record every ten seconds.
pub const MIN_ACTIVITY_RATE_HZ: f64 = 0.1;

/// The slowest sampling rate, Hz: a sample every ten seconds (the sensors refresh faster).
pub const MIN_SAMPLE_RATE_HZ: f64 = 0.1;

/// Configuration errors, with file and line.
pub type ConfigError = crate::support::file_error::FileError;

impl Config {
    /// Reads `path`; a missing default file means the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_PATH), false),
        };
        use crate::support::file_error::{read_text, FileError};
        match read_text(&path) {
            Ok(text) => Config::parse(&text, &path).map(|c| Config {
                file: Some(path.clone()),
                ..c
            }),
            Err(FileError::Io { source, .. })
                if !required && source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(Config::default())
            }
            Err(e) => Err(e),
        }
    }

    /// `path` (the default file) as the CLI reads it: where the agent's socket and runtime
    /// directory are, and the guard's window. A file the agent would refuse still gives
    /// those keys where they are valid on their own (a typo elsewhere must not hide a
    /// running agent, nor stop a restore); the error comes back beside them, for a warning.
    /// A missing file is the defaults.
    pub fn load_for_cli(path: &Path) -> (Config, Option<ConfigError>) {
        use crate::support::file_error::{read_text, FileError};
        let text = match read_text(path) {
            Ok(text) => text,
            Err(FileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return (Config::default(), None)
            }
            Err(e) => return (Config::default(), Some(e)),
        };
        let e = match Config::parse(&text, path) {
            Ok(c) => {
                let file = Some(path.to_path_buf());
                return (Config { file, ..c }, None);
            }
            Err(e) => e,
        };
        let table = text.parse::<toml::Table>().unwrap_or_default();
        let absolute = |key: &str| {
            table
                .get(key)
                .and_then(toml::Value::as_str)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let defaults = Config::default();
        let config = Config {
            socket: absolute("socket"),
            runtime_dir: absolute("runtime_dir"),
            budget_window_ms: table
                .get("budget_window_ms")
                .and_then(toml::Value::as_integer)
                .and_then(|ms| u64::try_from(ms).ok())
                .filter(|&ms| ms > 0)
                .unwrap_or(defaults.budget_window_ms),
            file: Some(path.to_path_buf()),
            ..defaults
        };
        (config, Some(e))
    }

    /// An error about `key`'s value found after parsing (against the board): it names the
    /// file and the key's line, as parse errors do.
    pub fn error_at(&self, key: &str, message: impl std::fmt::Display) -> anyhow::Error {
        let Some(path) = &self.file else {
            return anyhow::anyhow!("{key}: {message}");
        };
        let line = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| line_of_key(&text, key));
        match line {
            Some(line) => crate::support::file_error::FileError::Invalid {
                path: path.clone(),
                line,
                message: format!("{key}: {message}"),
            }
            .into(),
            None => anyhow::anyhow!("{}: {key}: {message}", path.display()),
        }
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(s.start));
            crate::support::file_error::FileError::Invalid {
                path: path.to_path_buf(),
                line,
                message: readable(
                    e.message(),
                    e.span().and_then(|s| key_at(text, s.start)).as_deref(),
                ),
            }
        })?;
        let bad = |key: &str, message: String| {
            let line = line_of_key(text, key).unwrap_or(1);
            crate::support::file_error::FileError::Invalid {
                path: path.to_path_buf(),
                line,
                message: format!("{key}: {message}"),
            }
        };
        let octal = !cfg.socket_mode.is_empty()
            && cfg.socket_mode.bytes().all(|b| (b'0'..=b'7').contains(&b));
        if !octal || u32::from_str_radix(&cfg.socket_mode, 8).map_or(true, |m| m > 0o777) {
            return Err(bad(
                "socket_mode",
                format!("{:?} is not an octal file mode", cfg.socket_mode),
            ));
        }
        match cfg.sensor_averaging.as_str() {
            "keep" | "auto" => {}
            n if n
                .parse::<u32>()
                .is_ok_and(|s| crate::board::ina3221::SAMPLES.contains(&s)) => {}
            n => {
                return Err(bad(
                    "sensor_averaging",
                    format!("{n:?}: keep, auto, or 1, 4, 16, 64, 128, 256, 512, 1024"),
                ))
            }
        }
        if let Some(r) = cfg.sample_rate_hz {
            if !(MIN_SAMPLE_RATE_HZ..=100_000.0).contains(&r) {
                return Err(bad(
                    "sample_rate_hz",
                    format!("{r} is not in [{MIN_SAMPLE_RATE_HZ}, 100000]"),
                ));
            }
        }
        let a = cfg.activity_rate_hz;
        if !(a == 0.0 || (MIN_ACTIVITY_RATE_HZ..=1000.0).contains(&a)) {
            return Err(bad(
                "activity_rate_hz",
                format!("{a} is neither 0 (the activity counters off) nor in [{MIN_ACTIVITY_RATE_HZ}, 1000]"),
            ));
        }
        if let Some(p) = cfg.rt_priority {
            if !(1..=99).contains(&p) {
                return Err(bad(
                    "rt_priority",
                    format!("{p} is not a SCHED_FIFO priority (1 to 99)"),
                ));
            }
        }
        // Whether the agent may run there is checked when it starts (every command reads
        // this file, some pinned elsewhere by taskset or a cpuset).
        if let Some(c) = cfg.sampler_cpu {
            let most = nix::sched::CpuSet::count();
            if c >= most {
                return Err(bad(
                    "sampler_cpu",
                    format!("{c} is not a CPU number (0 to {})", most - 1),
                ));
            }
        }
        if cfg.activity_window_ms == 0 {
            return Err(bad("activity_window_ms", "0 is not a window".into()));
        }
        // A window the file sets must fit; the default is cut to fit a high rate.
        let periods = crate::telemetry::activity::WINDOW_PERIODS;
        let longest_ms = f64::from(periods) * 1e3 / a;
        let set = line_of_key(text, "activity_window_ms").is_some();
        if set && a > 0.0 && cfg.activity_window_ms as f64 > longest_ms {
            return Err(bad(
                "activity_window_ms",
                format!(
                    "{} ms spans more than the {periods} records the activity section keeps at activity_rate_hz = {a} (at most {} ms; or lower the rate)",
                    cfg.activity_window_ms,
                    longest_ms.floor()
                ),
            ));
        }
        if let Some(b) = cfg.budget_w {
            if !(b > 0.0 && b.is_finite()) {
                return Err(bad(
                    "budget_w",
                    format!("{b} is not a positive number of watts"),
                ));
            }
        }
        let h = cfg.budget_hysteresis_w;
        if !(h >= 0.0 && h.is_finite()) {
            return Err(bad(
                "budget_hysteresis_w",
                format!("{h} is not a number of watts, zero or more"),
            ));
        }
        if cfg.max_clients == 0 {
            return Err(bad("max_clients", "must be at least 1".into()));
        }
        if cfg.budget_window_ms == 0 {
            return Err(bad("budget_window_ms", "must be at least 1".into()));
        }
        // The agent (started from `/` under systemd) and every command (started anywhere)
        // must resolve these to the same place.
        for (key, p) in [("socket", &cfg.socket), ("runtime_dir", &cfg.runtime_dir)] {
            if let Some(p) = p.as_ref().filter(|p| !p.is_absolute()) {
                return Err(bad(
                    key,
                    format!(
                        "{:?} is not an absolute path (the agent and each command would each take it from their own working directory)",
                        p.display().to_string()
                    ),
                ));
            }
        }
        if let Some(f) = &cfg.metrics_textfile {
            // node_exporter's textfile collector reads `*.prom` files only, by absolute path.
            if !f.is_absolute() || f.extension().is_none_or(|e| e != "prom") {
                return Err(bad(
                    "metrics_textfile",
                    format!(
                        "{:?} is not an absolute path ending in .prom (the only files node_exporter's textfile collector reads)",
                        f.display().to_string()
                    ),
                ));
            }
        }
        if cfg.metrics_textfile_interval_ms < 100 {
            return Err(bad(
                "metrics_textfile_interval_ms",
                format!("{} is below 100", cfg.metrics_textfile_interval_ms),
            ));
        }
        Ok(cfg)
    }

    /// The socket's mode bits.
    pub fn socket_mode_bits(&self) -> u32 {
        u32::from_str_radix(&self.socket_mode, 8).unwrap_or(0o660)
    }
}

/// A word (`keep`, `auto`) or a count, written `64` or `"64"`, as the string of either.
fn word_or_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct WordOrCount;
    impl serde::de::Visitor<'_> for WordOrCount {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("sensor_averaging: \"keep\", \"auto\" or a count (1, 4, 16, 64, 128, 256, 512, 1024)")
        }
        fn visit_str<E: serde::de::Error>(self, w: &str) -> Result<String, E> {
            Ok(w.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<String, E> {
            Ok(n.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<String, E> {
            Ok(n.to_string())
        }
    }
    d.deserialize_any(WordOrCount)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::parse(text, Path::new("j.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn defaults_and_a_full_file() {
        assert_eq!(
            Config::parse("", Path::new("x")).unwrap(),
            Config::default()
        );
        let c = Config::parse(
            "budget_w = 25.5\nsensor_averaging = \"auto\"\ndefault_mode = \"MODE_30W\"\nlease_timeout_ms = 5000\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.budget_w, Some(25.5));
        assert_eq!(c.default_mode.as_deref(), Some("MODE_30W"));
        // A count as the README lists it, unquoted (found by an integrator's review).
        for text in ["sensor_averaging = 64\n", "sensor_averaging = \"64\"\n"] {
            let c = Config::parse(text, Path::new("x")).unwrap();
            assert_eq!(c.sensor_averaging, "64");
        }
    }

    #[test]
    fn a_hysteresis_that_is_not_a_number_of_watts_is_refused() {
        for bad in ["nan", "inf", "-1.0"] {
            let e = err(&format!("budget_hysteresis_w = {bad}\n"));
            assert!(e.contains("budget_hysteresis_w"), "{e}");
        }
        assert!(Config::parse("budget_hysteresis_w = 0.0\n", Path::new("x")).is_ok());
    }

    #[test]
    fn the_packaged_file_states_the_defaults() {
        let shipped = include_str!("../../udev/jpower.toml");
        assert_eq!(
            Config::parse(shipped, Path::new("jpower.toml")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_file_and_line() {
        assert!(
            err("budget_w = 20\nbugdet = 3\n").starts_with("j.toml:2: unknown field `bugdet`"),
            "{}",
            err("budget_w = 20\nbugdet = 3\n")
        );
        assert!(
            err("\n\nbudget_w = \"lots\"\n").starts_with("j.toml:3:"),
            "{}",
            err("\n\nbudget_w = \"lots\"\n")
        );
        let e = err("x = [\n");
        assert!(e.starts_with("j.toml:") && e.lines().count() == 1, "{e}");
        assert!(err("\nsocket_mode = \"999\"\n").starts_with("j.toml:2: socket_mode"));
        assert!(err("sensor_averaging = \"3\"\n").starts_with("j.toml:1: sensor_averaging"));
        assert!(err("sensor_averaging = 3\n").starts_with("j.toml:1: sensor_averaging"));
        let e = err("\nsensor_averaging = 64.0\n");
        assert!(
            e.starts_with("j.toml:2: ") && e.contains("expected sensor_averaging: \"keep\""),
            "{e}"
        );
        assert!(err("budget_w = -1.0\n").contains("positive"));
    }

    /// Found by a review feeding jpower bad input: a key whose name begins another's was
    /// blamed for the other's line, and these values passed the checks (a tiny activity
    /// rate aborted the agent at start; `+7` parsed as an octal mode).
    #[test]
    fn each_bad_value_names_its_own_line() {
        let e = err("budget_window_ms = 500\nbudget_w = -1\n");
        assert!(e.starts_with("j.toml:2: budget_w"), "{e}");
        // A quoted key, and a line that looks like the key inside a multi-line string.
        let e = err("# c\n\n\"budget_w\" = -1\n");
        assert!(e.starts_with("j.toml:3: budget_w"), "{e}");
        let e = err(
            "default_mode = \"\"\"\nbudget_w = 5\n\"\"\"\nbudget_window_ms = 500\nbudget_w = -1\n",
        );
        assert!(e.starts_with("j.toml:5: budget_w"), "{e}");
        for (text, key) in [
            ("activity_rate_hz = 1e-320\n", "activity_rate_hz"),
            ("activity_rate_hz = 0.05\n", "activity_rate_hz"),
            ("activity_rate_hz = 1001.0\n", "activity_rate_hz"),
            ("activity_window_ms = 100000\n", "activity_window_ms"),
            ("rt_priority = 500\n", "rt_priority"),
            ("rt_priority = 0\n", "rt_priority"),
            ("sampler_cpu = 99999\n", "sampler_cpu"),
            ("socket_mode = \"+7\"\n", "socket_mode"),
            ("socket_mode = \"\"\n", "socket_mode"),
            ("sample_rate_hz = 1e-300\n", "sample_rate_hz"),
            ("runtime_dir = \"relative\"\n", "runtime_dir"),
            ("socket = \"run/jpower.sock\"\n", "socket"),
        ] {
            let e = err(&format!("\n{text}"));
            assert!(e.starts_with(&format!("j.toml:2: {key}")), "{text}: {e}");
        }
        let ok = "activity_rate_hz = 0.0\nrt_priority = 50\nsampler_cpu = 1023\nsocket_mode = \"0600\"\nruntime_dir = \"/run/j\"\nsocket = \"/run/j/s\"\n";
        assert!(Config::parse(ok, Path::new("x")).is_ok());
        assert!(Config::parse("activity_rate_hz = 0.1\n", Path::new("x")).is_ok());
        // 63 records at 50 Hz, and any window with the counters off.
        let longest = "activity_window_ms = 1260\n";
        assert!(Config::parse(longest, Path::new("x")).is_ok());
        let off = "activity_rate_hz = 0\nactivity_window_ms = 100000\n";
        assert!(Config::parse(off, Path::new("x")).is_ok());
        // The default window at a documented rate it does not fit (found by review: the
        // agent refused a file that set only the rate).
        assert!(Config::parse("activity_rate_hz = 1000.0\n", Path::new("x")).is_ok());
        let e = err("activity_rate_hz = 1000.0\n\nactivity_window_ms = 200\n");
        assert!(e.starts_with("j.toml:3: activity_window_ms"), "{e}");
    }

    /// Found by review: a typo in an agent-only key made the CLI drop the file's valid
    /// `runtime_dir`, so `set` wrote the knobs beside a running agent it no longer found.
    #[test]
    fn the_cli_keeps_the_valid_keys_of_a_file_the_agent_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jpower.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load_for_cli(&path)
        };
        let (c, e) = load("runtime_dir = \"/srv/j\"\ntypo = 1\nbudget_window_ms = 3000\n");
        assert!(e
            .unwrap()
            .to_string()
            .contains("jpower.toml:2: unknown field `typo`"));
        assert_eq!(c.runtime_dir.as_deref(), Some(Path::new("/srv/j")));
        assert_eq!((c.socket, c.budget_window_ms), (None, 3000));
        let (c, e) = load("socket = \"relative.sock\"\nbudget_window_ms = 0\n");
        assert!(
            e.is_some() && c.socket.is_none(),
            "a relative path is not valid on its own"
        );
        assert_eq!(c.budget_window_ms, Config::default().budget_window_ms);
        let (c, e) = load("this is [ not toml\n");
        assert!(e.is_some() && c.runtime_dir.is_none());
        let (c, e) = load("runtime_dir = \"/srv/j\"\n");
        assert!(e.is_none() && c.runtime_dir.is_some());
        std::fs::remove_file(&path).unwrap();
        assert!(
            Config::load_for_cli(&path).1.is_none(),
            "no file: the defaults"
        );
    }

    /// Found by a packaging review: type errors spoke Rust (`expected usize`) and named no
    /// key, and an address with a host name said only "invalid socket address syntax".
    #[test]
    fn type_errors_name_their_key_in_toml_words() {
        assert_eq!(
            err("\nmax_clients = \"64\"\n"),
            "j.toml:2: max_clients: invalid type: string \"64\", expected a nonnegative integer"
        );
        assert_eq!(
            err("budget_w = { a = 1 }\n"),
            "j.toml:1: budget_w: invalid type: map, expected a number"
        );
        assert!(err("metrics_listen = \"localhost:9102\"\n")
            .starts_with("j.toml:1: metrics_listen: expected an IP address and port"));
        // The key is the one whose value the error's span falls in, whatever the lines of
        // a multi-line value read like.
        let e = err("default_mode = \"\"\"\nmax_clients = 1\n\"\"\"\nsocket_mode = 1\n");
        assert!(e.starts_with("j.toml:4: socket_mode: invalid type"), "{e}");
        let e = err("sensor_averaging = [\n  \"max_clients = 2\",\n]\n");
        assert_eq!(e.matches("sensor_averaging").count(), 1, "named once: {e}");
        assert!(!e.contains("max_clients:"), "{e}");
    }

    #[test]
    fn metrics_outputs_are_off_by_default_and_checked_with_file_and_line() {
        let c = Config::parse(
            "metrics_listen = \"127.0.0.1:9102\"\nmetrics_textfile = \"/var/lib/prometheus/node-exporter/jpower.prom\"\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9102".parse().unwrap()));
        assert!(c.metrics_textfile.unwrap().ends_with("jpower.prom"));
        assert_eq!(Config::default().metrics_listen, None);
        assert_eq!(Config::default().metrics_textfile, None);
        let e = err("\nmetrics_listen = \"localhost\"\n");
        assert!(e.starts_with("j.toml:2:"), "{e}");
        let e = err("\n\nmetrics_textfile = \"/tmp/jpower.txt\"\n");
        assert!(e.starts_with("j.toml:3: metrics_textfile"), "{e}");
        let e = err("metrics_textfile = \"jpower.prom\"\n");
        assert!(e.starts_with("j.toml:1: metrics_textfile"), "{e}");
        let e = err("metrics_textfile_interval_ms = 5\n");
        assert!(
            e.starts_with("j.toml:1: metrics_textfile_interval_ms"),
            "{e}"
        );
    }
}
