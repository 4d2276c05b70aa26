//! Parser for NVIDIA `nvpmodel.conf`, the power-mode tables applied by `/usr/sbin/nvpmodel`.
//!
//! The format is line oriented. Blank lines and lines starting with `#` are ignored, and so is
//! whitespace around a line (a CRLF `\r` included). A line starting with `<` is a block header
//! `< KIND KEY=VALUE ... >`: the spaces after `<` and before `>` are optional (real files have
//! `<PARAM TYPE=CLOCK NAME=EMC >`) and attributes may come in any order. Other lines belong to
//! the block opened by the last header:
//!
//! * `< PARAM TYPE=FILE|CLOCK|HWMON NAME=n >`, then argument lines `ARG_NAME ARG_PATH`
//!   (`MAX_FREQ_KNEXT` and friends give upstream-kernel paths). HWMON lines have a third field,
//!   `ARG_NAME ARG_PATH ARG_ATTR`: a directory holding `hwmon*` and the attribute inside it.
//! * `< POWER_MODEL ID=n NAME=name >`, then settings `PARAM_NAME ARG_NAME VALUE`, applied by
//!   nvpmodel in file order. CLOCK and HWMON values are integers (`-1` = table maximum); FILE
//!   values are strings written verbatim (`1`, `248`, `on`, `auto`).
//! * `< PM_CONFIG DEFAULT=id >` (mandatory): the ID of the default mode.
//! * `< FAN_CONFIG DEFAULT=profile >` (optional): the default fan profile.
//!
//! Guarantees: [`NvpConfig::parse`] returns either an error naming the file and 1-based line, or
//! a config in which parameter names, argument names within a parameter, mode IDs and mode names
//! (ignoring ASCII case) are unique; every setting names a declared parameter and one of its
//! arguments, and is [`SettingValue::Int`] for CLOCK/HWMON and [`SettingValue::Text`] for FILE;
//! there is at least one mode and `default_mode` is one of their IDs. Everything declared is kept,
//! in file order. PARAM blocks may come after the modes using them. Nothing is skipped silently:
//! unknown block kinds or attributes and wrong field counts are errors. The parser never panics.

use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A parsed `nvpmodel.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvpConfig {
    /// The file the config was read from.
    pub path: PathBuf,
    /// Every `PARAM` block, in file order.
    pub params: Vec<Param>,
    /// Every `POWER_MODEL` block, in file order.
    pub modes: Vec<PowerModel>,
    /// The ID named by `< PM_CONFIG DEFAULT=... >`; always the ID of one of `modes`.
    pub default_mode: u32,
    /// The profile named by `< FAN_CONFIG DEFAULT=... >`, if present.
    pub fan_default: Option<String>,
}

/// The `TYPE=` of a `PARAM` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `FILE`: the value is written verbatim to the argument's path.
    File,
    /// `CLOCK`: an integer frequency in the file's unit; `-1` means the table maximum.
    Clock,
    /// `HWMON`: an integer written to a hwmon attribute (e.g. a current limit in mA).
    Hwmon,
}

impl ParamType {
    /// The keyword after `TYPE=`: `FILE`, `CLOCK` or `HWMON`.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::File => "FILE",
            ParamType::Clock => "CLOCK",
            ParamType::Hwmon => "HWMON",
        }
    }
}

/// One `< PARAM TYPE=... NAME=... >` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The parameter type.
    pub ty: ParamType,
    /// The `NAME=`, e.g. `CPU_ONLINE`, `GPU`, `EMC`.
    pub name: String,
    /// The argument lines, in file order.
    pub args: Vec<ParamArg>,
    /// 1-based line of the header.
    pub line: usize,
}

impl Param {
    /// The argument called `name` (exact match), e.g. `MAX_FREQ` or `MAX_FREQ_KNEXT`.
    pub fn arg(&self, name: &str) -> Option<&ParamArg> {
        self.args.iter().find(|a| a.name == name)
    }
}

/// One argument line of a `PARAM` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamArg {
    /// `ARG_NAME`, e.g. `CORE_4`, `MAX_FREQ`.
    pub name: String,
    /// `ARG_PATH`: the sysfs file (FILE, CLOCK) or the hwmon parent directory (HWMON).
    pub path: String,
    /// `ARG_ATTR`: the hwmon attribute, e.g. `curr1_max` (HWMON only).
    pub attr: Option<String>,
    /// 1-based line.
    pub line: usize,
}

/// One `< POWER_MODEL ID=... NAME=... >` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerModel {
    /// The `ID=`, as given to `nvpmodel -m`.
    pub id: u32,
    /// The `NAME=`, e.g. `MAXN`, `MODE_15W`.
    pub name: String,
    /// The settings, in file order (the order nvpmodel applies them in).
    pub settings: Vec<Setting>,
    /// 1-based line of the header.
    pub line: usize,
}

impl PowerModel {
    /// The setting of `param`/`arg`; if set more than once, the last (the one that takes effect).
    pub fn setting(&self, param: &str, arg: &str) -> Option<&Setting> {
        let mut found = self.settings.iter().rev();
        found.find(|s| s.param == param && s.arg == arg)
    }
}

/// One setting line `PARAM_NAME ARG_NAME VALUE` of a `POWER_MODEL` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// A declared parameter.
    pub param: String,
    /// One of that parameter's arguments.
    pub arg: String,
    /// The value, typed by the parameter's type.
    pub value: SettingValue,
    /// 1-based line.
    pub line: usize,
}

/// The value of a [`Setting`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingValue {
    /// A CLOCK or HWMON value; `-1` means the maximum of the frequency table.
    Int(i64),
    /// A FILE value, written verbatim (`1`, `248`, `on`, `auto`).
    Text(String),
}

/// Why a config could not be loaded.
///
/// Every variant carries `path`, the file. All but `Io` also carry `line`, the 1-based line the
/// error is about, and Display as `path:line: message`.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are described above and in the variant docs
pub enum NvpError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Malformed header, wrong field count, line outside any block, duplicate declaration...
    #[error("{path}:{line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A setting names a parameter that no `PARAM` block declares.
    #[error("{path}:{line}: unknown parameter `{param}` (no PARAM block declares it)")]
    UnknownParam {
        path: PathBuf,
        line: usize,
        param: String,
    },
    /// A setting names an argument that its (declared) parameter does not have.
    #[error("{path}:{line}: parameter `{param}` has no argument `{arg}`")]
    UnknownArg {
        path: PathBuf,
        line: usize,
        param: String,
        arg: String,
    },
    /// A CLOCK/HWMON value or an ID is not an integer (or out of range); `what` says which one,
    /// `text` is what the file has.
    #[error("{path}:{line}: {what} must be an integer, found `{text}`")]
    BadNumber {
        path: PathBuf,
        line: usize,
        what: String,
        text: String,
    },
    /// A second `POWER_MODEL` with the ID of the one at `first_line`.
    #[error("{path}:{line}: duplicate POWER_MODEL ID={id} (first defined on line {first_line})")]
    DuplicateMode {
        path: PathBuf,
        line: usize,
        id: u32,
        first_line: usize,
    },
    /// No `< PM_CONFIG DEFAULT=... >`; `line` is the last line of the file.
    #[error("{path}:{line}: missing mandatory `< PM_CONFIG DEFAULT=id >` section")]
    MissingDefault { path: PathBuf, line: usize },
    /// `PM_CONFIG DEFAULT=id` names no mode; `line` is that of the `PM_CONFIG`.
    #[error("{path}:{line}: PM_CONFIG DEFAULT={id} names no POWER_MODEL")]
    BadDefault { path: PathBuf, line: usize, id: u32 },
    /// No `POWER_MODEL` at all; `line` is the last line of the file.
    #[error("{path}:{line}: no POWER_MODEL section (at least one is required)")]
    Empty { path: PathBuf, line: usize },
}

/// `return Err(NvpError::Syntax { .. })` with a formatted message.
macro_rules! bail {
    ($path:expr, $line:expr, $($fmt:tt)+) => {
        return Err(NvpError::Syntax {
            path: $path.to_path_buf(),
            line: $line,
            message: format!($($fmt)+),
        })
    };
}

/// Parses `text` as a `T`, or a [`NvpError::BadNumber`] about `what`.
fn number<T: FromStr>(text: &str, what: &str, line: usize, path: &Path) -> Result<T, NvpError> {
    text.parse().map_err(|_| NvpError::BadNumber {
        path: path.to_path_buf(),
        line,
        what: what.to_string(),
        text: text.to_string(),
    })
}

/// A block header `< KIND KEY=VALUE ... >`, with where it was found.
struct Header<'t, 'p> {
    kind: &'t str,
    attrs: Vec<(&'t str, &'t str)>,
    line: usize,
    path: &'p Path,
}

impl<'t, 'p> Header<'t, 'p> {
    fn parse(body: &'t str, line: usize, path: &'p Path) -> Result<Self, NvpError> {
        let Some(inner) = body.strip_prefix('<').and_then(|b| b.strip_suffix('>')) else {
            bail!(path, line, "block header `{body}` is not closed with `>`");
        };
        let mut tokens = inner.split_whitespace();
        let Some(kind) = tokens.next() else {
            bail!(path, line, "empty block header `{body}`");
        };
        let mut attrs: Vec<(&str, &str)> = Vec::new();
        for token in tokens {
            let pair = token.split_once('=');
            let Some((key, value)) = pair.filter(|(k, v)| !k.is_empty() && !v.is_empty()) else {
                bail!(path, line, "attribute `{token}` is not KEY=VALUE");
            };
            if attrs.iter().any(|(k, _)| *k == key) {
                bail!(path, line, "attribute {key}= given twice in {kind}");
            }
            attrs.push((key, value));
        }
        Ok(Header {
            kind,
            attrs,
            line,
            path,
        })
    }

    /// The values of exactly the attributes `keys`: all required, no others allowed.
    fn values<const N: usize>(&self, keys: [&str; N]) -> Result<[&'t str; N], NvpError> {
        let (kind, line, path) = (self.kind, self.line, self.path);
        if let Some((key, _)) = self.attrs.iter().find(|(k, _)| !keys.contains(k)) {
            bail!(path, line, "unknown attribute {key}= in {kind}");
        }
        // A name printed to a terminal, or compared, must be what it looks like.
        if let Some((key, value)) = self
            .attrs
            .iter()
            .find(|(_, v)| v.chars().any(char::is_control))
        {
            bail!(path, line, "{key}={value:?} holds a control character");
        }
        let mut out = [""; N];
        for (slot, key) in out.iter_mut().zip(keys) {
            match self.attrs.iter().find(|(k, _)| *k == key) {
                Some((_, value)) => *slot = value,
                None => bail!(path, line, "{kind} header lacks the {key}= attribute"),
            }
        }
        Ok(out)
    }
}

impl NvpConfig {
    /// Reads `path`, then [`NvpConfig::parse`]s it.
    pub fn load(path: &Path) -> Result<NvpConfig, NvpError> {
        use crate::support::file_error::{read_text, FileError};
        match read_text(path) {
            Ok(text) => NvpConfig::parse(&text, path),
            Err(FileError::Io { path, source }) => Err(NvpError::Io { path, source }),
            Err(FileError::Invalid {
                path,
                line,
                message,
            }) => Err(NvpError::Syntax {
                path,
                line,
                message,
            }),
        }
    }

    /// Parses the text of an `nvpmodel.conf`; `path` is recorded and used in errors.
    pub fn parse(text: &str, path: &Path) -> Result<NvpConfig, NvpError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut parser = Parser {
            path,
            params: Vec::new(),
            modes: Vec::new(),
            pending: Vec::new(),
            default: None,
            fan: None,
            block: Block::Outside,
        };
        let mut last_line = 1;
        // Lines end in LF or CRLF (the CR is trimmed with the blanks), or in CR alone where
        // an editor wrote classic Mac line ends.
        let lines: Vec<&str> = if text.contains('\n') {
            text.lines().collect()
        } else {
            text.split('\r').collect()
        };
        for (line, body) in lines.iter().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            last_line = line;
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            if body.starts_with('<') {
                parser.header(body, line)?;
            } else {
                parser.data(body, line)?;
            }
        }
        parser.finish(last_line)
    }

    /// The parameter called `name` (exact match).
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The mode with ID `id`.
    pub fn mode(&self, id: u32) -> Option<&PowerModel> {
        self.modes.iter().find(|m| m.id == id)
    }

    /// The mode called `name`, ignoring ASCII case (`maxn` finds `MAXN`).
    #[cfg(test)]
    pub fn mode_by_name(&self, name: &str) -> Option<&PowerModel> {
        self.modes
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
    }
}

/// The block that data lines currently belong to.
#[derive(Clone, Copy)]
enum Block {
    Outside,
    Param,
    Mode,
}

/// Parsing state; settings stay raw (`pending`, parallel to `modes`) until all PARAMs are known.
struct Parser<'t, 'p> {
    path: &'p Path,
    params: Vec<Param>,
    modes: Vec<PowerModel>,
    pending: Vec<Vec<([&'t str; 3], usize)>>,
    default: Option<(u32, usize)>,
    fan: Option<(&'t str, usize)>,
    block: Block,
}

impl<'t> Parser<'t, '_> {
    /// A line inside a block: a PARAM argument or a POWER_MODEL setting.
    fn data(&mut self, body: &'t str, line: usize) -> Result<(), NvpError> {
        let fields: Vec<&str> = body.split_whitespace().collect();
        let path = self.path;
        match (self.block, self.params.last_mut(), self.pending.last_mut()) {
            (Block::Param, Some(param), _) => param.push_arg(&fields, line, path),
            (Block::Mode, _, Some(settings)) => match fields.as_slice() {
                &[p, a, v] => {
                    settings.push(([p, a, v], line));
                    Ok(())
                }
                _ => bail!(path, line, "setting must be `PARAM ARG VALUE`: `{body}`"),
            },
            _ => bail!(path, line, "data line outside any block: `{body}`"),
        }
    }

    /// A `< KIND ... >` line: opens a PARAM or POWER_MODEL block, or records a default.
    fn header(&mut self, body: &'t str, line: usize) -> Result<(), NvpError> {
        let path = self.path;
        let header = Header::parse(body, line, path)?;
        self.block = Block::Outside;
        match header.kind {
            "PARAM" => {
                let [ty, name] = header.values(["TYPE", "NAME"])?;
                let types = [ParamType::File, ParamType::Clock, ParamType::Hwmon];
                let Some(ty) = types.into_iter().find(|t| t.as_str() == ty) else {
                    bail!(path, line, "unknown PARAM TYPE={ty}");
                };
                if let Some(first) = self.params.iter().find(|p| p.name == name).map(|p| p.line) {
                    bail!(path, line, "duplicate PARAM {name} (first on line {first})");
                }
                let (name, args) = (name.to_string(), Vec::new());
                self.params.push(Param {
                    ty,
                    name,
                    args,
                    line,
                });
                self.block = Block::Param;
            }
            "POWER_MODEL" => {
                let [id, name] = header.values(["ID", "NAME"])?;
                let id: u32 = number(id, "POWER_MODEL ID", line, path)?;
                if let Some(first) = self.modes.iter().find(|m| m.id == id) {
                    let (path, first_line) = (path.to_path_buf(), first.line);
                    return Err(NvpError::DuplicateMode {
                        path,
                        line,
                        id,
                        first_line,
                    });
                }
                let same_name = |m: &&PowerModel| m.name.eq_ignore_ascii_case(name);
                if let Some(first) = self.modes.iter().find(same_name).map(|m| m.line) {
                    bail!(path, line, "duplicate mode {name} (first on line {first})");
                }
                let (name, settings) = (name.to_string(), Vec::new());
                self.modes.push(PowerModel {
                    id,
                    name,
                    settings,
                    line,
                });
                self.pending.push(Vec::new());
                self.block = Block::Mode;
            }
            "PM_CONFIG" => {
                let [id] = header.values(["DEFAULT"])?;
                if let Some((_, first)) = self.default {
                    bail!(path, line, "duplicate PM_CONFIG (first on line {first})");
                }
                self.default = Some((number(id, "PM_CONFIG DEFAULT", line, path)?, line));
            }
            "FAN_CONFIG" => {
                let [profile] = header.values(["DEFAULT"])?;
                if let Some((_, first)) = self.fan {
                    bail!(path, line, "duplicate FAN_CONFIG (first on line {first})");
                }
                self.fan = Some((profile, line));
            }
            other => bail!(path, line, "unknown block `< {other} ... >`"),
        }
        Ok(())
    }

    /// Resolves the settings and checks the whole-file rules.
    fn finish(mut self, last_line: usize) -> Result<NvpConfig, NvpError> {
        for (mode, settings) in self.modes.iter_mut().zip(self.pending) {
            for raw in settings {
                mode.settings.push(resolve(&self.params, raw, self.path)?);
            }
        }
        let (path, line) = (self.path.to_path_buf(), last_line);
        if self.modes.is_empty() {
            return Err(NvpError::Empty { path, line });
        }
        let Some((default_mode, line)) = self.default else {
            return Err(NvpError::MissingDefault { path, line });
        };
        if !self.modes.iter().any(|m| m.id == default_mode) {
            let id = default_mode;
            return Err(NvpError::BadDefault { path, line, id });
        }
        Ok(NvpConfig {
            path,
            params: self.params,
            modes: self.modes,
            default_mode,
            fan_default: self.fan.map(|(profile, _)| profile.to_string()),
        })
    }
}

impl Param {
    /// Adds an argument line: 2 fields, or 3 for HWMON.
    fn push_arg(&mut self, fields: &[&str], line: usize, path: &Path) -> Result<(), NvpError> {
        let (name, arg_path, attr) = match (self.ty, fields) {
            (ParamType::Hwmon, &[name, p, attr]) => (name, p, Some(attr.to_string())),
            (ParamType::File | ParamType::Clock, &[name, p]) => (name, p, None),
            (ty, _) => {
                let want = if ty == ParamType::Hwmon { " ATTR" } else { "" };
                let ty = ty.as_str();
                bail!(path, line, "{ty} argument must be `NAME PATH{want}`")
            }
        };
        if let Some(ParamArg { line: first, .. }) = self.arg(name) {
            bail!(path, line, "argument {name} already on line {first}");
        }
        let (name, path) = (name.to_string(), arg_path.to_string());
        self.args.push(ParamArg {
            name,
            path,
            attr,
            line,
        });
        Ok(())
    }
}

/// Checks a setting against the declared parameters and types its value.
fn resolve(params: &[Param], raw: ([&str; 3], usize), path: &Path) -> Result<Setting, NvpError> {
    let ([param, arg, text], line) = raw;
    let Some(declared) = params.iter().find(|p| p.name == param) else {
        let (path, param) = (path.to_path_buf(), param.to_string());
        return Err(NvpError::UnknownParam { path, line, param });
    };
    if declared.arg(arg).is_none() {
        let (path, param, arg) = (path.to_path_buf(), param.to_string(), arg.to_string());
        return Err(NvpError::UnknownArg {
            path,
            line,
            param,
            arg,
        });
    }
    let value = match declared.ty {
        ParamType::File => SettingValue::Text(text.to_string()),
        _ => SettingValue::Int(number(
            text,
            &format!("value of {param} {arg}"),
            line,
            path,
        )?),
    };
    let (param, arg) = (param.to_string(), arg.to_string());
    Ok(Setting {
        param,
        arg,
        value,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Project-written fixture (not an NVIDIA file): header spacing variants, attributes out of
    /// order, FILE/CLOCK/HWMON params, a KNEXT argument, two modes, a default and a fan profile.
    const FIXTURE: &str = "# jpower test fixture
<PARAM NAME=CPU_ONLINE TYPE=FILE>
CORE_0 /sys/devices/system/cpu/cpu0/online
CORE_1 /sys/devices/system/cpu/cpu1/online

< PARAM TYPE=FILE NAME=GPU_POWER_CONTROL_ENABLE >
GPU_PWR_CNTL_EN /sys/devices/gpu.0/power/control
<PARAM TYPE=CLOCK NAME=GPU >
MAX_FREQ /sys/devices/gpu/devfreq/gpu/max_freq
MAX_FREQ_KNEXT /sys/devices/gpu/devfreq_dev/max_freq
< PARAM TYPE=HWMON NAME=VDDIN_OC_LIMIT>
WARN /sys/bus/i2c/devices/1-0040/hwmon curr1_max
    # indented comment
< POWER_MODEL ID=0 NAME=FULL >
CPU_ONLINE CORE_1 1
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MAX_FREQ -1
VDDIN_OC_LIMIT WARN 5000
< POWER_MODEL NAME=Quiet_10W ID=4 >
CPU_ONLINE CORE_1 0
GPU MAX_FREQ_KNEXT 306000000
GPU MAX_FREQ 306000000
< PM_CONFIG DEFAULT=4 >
<FAN_CONFIG DEFAULT=quiet>
";

    /// Every field of `cfg`, one line per item, prefixed with its line number.
    fn dump(cfg: &NvpConfig) -> String {
        let (path, default, fan) = (cfg.path.display(), cfg.default_mode, &cfg.fan_default);
        let mut out = format!("{path} default={default} fan={fan:?}\n");
        for p in &cfg.params {
            out += &format!("{} PARAM {:?} {}\n", p.line, p.ty, p.name);
            for a in &p.args {
                out += &format!("{}   {} {} {:?}\n", a.line, a.name, a.path, a.attr);
            }
        }
        for m in &cfg.modes {
            out += &format!("{} MODE {} {}\n", m.line, m.id, m.name);
            for s in &m.settings {
                out += &format!("{}   {} {} {:?}\n", s.line, s.param, s.arg, s.value);
            }
        }
        out
    }

    const FIXTURE_DUMP: &str = r#"fixture.conf default=4 fan=Some("quiet")
2 PARAM File CPU_ONLINE
3   CORE_0 /sys/devices/system/cpu/cpu0/online None
4   CORE_1 /sys/devices/system/cpu/cpu1/online None
6 PARAM File GPU_POWER_CONTROL_ENABLE
7   GPU_PWR_CNTL_EN /sys/devices/gpu.0/power/control None
8 PARAM Clock GPU
9   MAX_FREQ /sys/devices/gpu/devfreq/gpu/max_freq None
10   MAX_FREQ_KNEXT /sys/devices/gpu/devfreq_dev/max_freq None
11 PARAM Hwmon VDDIN_OC_LIMIT
12   WARN /sys/bus/i2c/devices/1-0040/hwmon Some("curr1_max")
14 MODE 0 FULL
15   CPU_ONLINE CORE_1 Text("1")
16   GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN Text("on")
17   GPU MAX_FREQ Int(-1)
18   VDDIN_OC_LIMIT WARN Int(5000)
19 MODE 4 Quiet_10W
20   CPU_ONLINE CORE_1 Text("0")
21   GPU MAX_FREQ_KNEXT Int(306000000)
22   GPU MAX_FREQ Int(306000000)
"#;

    #[test]
    fn fixture_parses_exactly() {
        let parse = |text: &str| NvpConfig::parse(text, Path::new("fixture.conf")).unwrap();
        let cfg = parse(FIXTURE);
        assert_eq!(dump(&cfg), FIXTURE_DUMP);
        // CRLF line ends, trailing blanks and a BOM change nothing.
        let crlf = format!("\u{feff}{}", FIXTURE.replace('\n', " \t\r\n"));
        assert_eq!(parse(&crlf), cfg);
        let cr = FIXTURE.replace('\n', "\r");
        assert_eq!(parse(&cr), cfg, "CR-only line ends");
        let bad = NvpConfig::parse(
            "< PARAM TYPE=CLOCK NAME=GPU >\r< NOPE >\r",
            Path::new("cr.conf"),
        );
        assert!(bad.unwrap_err().to_string().starts_with("cr.conf:2: "));
        let knext = cfg.param("GPU").and_then(|p| p.arg("MAX_FREQ_KNEXT"));
        assert_eq!(knext.map(|a| a.line), Some(10));
        assert_eq!(cfg.mode_by_name("quiet_10w").map(|m| m.id), Some(4));
        assert!(cfg.mode(1).is_none() && cfg.param("EMC").is_none());
        let max = cfg.mode(4).and_then(|m| m.setting("GPU", "MAX_FREQ"));
        assert_eq!(max.map(|s| s.line), Some(22));
    }

    /// A GPU CLOCK param (lines 1-2) and the header of mode 1 (line 3).
    const HEAD: &str =
        "< PARAM TYPE=CLOCK NAME=GPU >\nMAX_FREQ /g\n< POWER_MODEL ID=1 NAME=ONE >\n";

    /// `HEAD`, then `middle` from line 4 on, then a `PM_CONFIG DEFAULT=1`.
    fn conf(middle: &str) -> String {
        format!("{HEAD}{middle}< PM_CONFIG DEFAULT=1 >\n")
    }

    /// `text` must fail with `variant` at `line` (Debug `Variant { path: "bad.conf", line: N..`),
    /// with a Display that starts with `bad.conf:N: ` and contains `detail`.
    fn fails(text: &str, line: usize, variant: &str, detail: &str) {
        let err = NvpConfig::parse(text, Path::new("bad.conf")).expect_err(text);
        let debug = format!("{err:?}");
        let rest = debug.strip_prefix(&format!("{variant} {{ path: \"bad.conf\", line: {line}"));
        assert!(rest.is_some_and(|r| r.starts_with([',', ' '])), "{debug}");
        let shown = err.to_string();
        assert!(shown.starts_with(&format!("bad.conf:{line}: ")), "{shown}");
        assert!(shown.contains(detail), "{shown}");
    }

    #[test]
    #[rustfmt::skip]
    fn malformed_inputs_name_variant_and_line() {
        fails(&conf("< POWER_MODEL ID=2 NAME=X\nGPU MAX_FREQ 1\n"), 4, "Syntax", "not closed");
        fails(&format!("# comment\nGPU MAX_FREQ 1\n{HEAD}"), 2, "Syntax", "outside any block");
        fails(&conf("GPU MAX_FREQ 1\nCPU MAX_FREQ 1\n"), 5, "UnknownParam", "`CPU`");
        fails(&conf("GPU MIN_FREQ 1\n"), 4, "UnknownArg", "`GPU` has no argument `MIN_FREQ`");
        fails(&conf("GPU MAX_FREQ 12x\n"), 4, "BadNumber", "found `12x`");
        fails(&conf("< POWER_MODEL NAME=TWO ID=1 >\n"), 4, "DuplicateMode", "on line 3");
        fails(&format!("{HEAD}GPU MAX_FREQ 1\n\n# end\n"), 6, "MissingDefault", "PM_CONFIG");
        fails(&format!("{HEAD}< PM_CONFIG DEFAULT=9 >\n"), 4, "BadDefault", "DEFAULT=9 names no");
        fails("< PARAM TYPE=CLOCK NAME=C >\nMAX /g\n< PM_CONFIG DEFAULT=0 >\n", 3, "Empty", "");
        fails("", 1, "Empty", "no POWER_MODEL");
        fails(&conf("< POWER_MODEL ID=-1 NAME=N >\n"), 4, "BadNumber", "POWER_MODEL ID");
        fails(&conf("< PM_CONFIG DEFAULT=max >\n"), 4, "BadNumber", "found `max`");
        let err = NvpConfig::load(Path::new("/nonexistent/nvpmodel.conf")).unwrap_err();
        assert!(matches!(err, NvpError::Io { .. }), "{err}");
    }

    #[test]
    #[rustfmt::skip]
    fn other_malformed_lines_are_syntax_errors() {
        for (middle, line, detail) in [
            ("< XYZ A=1 >\n", 4, "unknown block `< XYZ ... >`"),
            ("< PARAM TYPE=FAN NAME=F >\n", 4, "unknown PARAM TYPE=FAN"),
            ("< PARAM TYPE=HWMON NAME=H >\nWARN /sys/hwmon\n", 5, "HWMON argument must be"),
            ("< PARAM TYPE=CLOCK NAME=C >\nMAX_FREQ /a extra\n", 5, "CLOCK argument must be"),
            ("< PARAM TYPE=CLOCK NAME=C >\nMAX /a\nMAX /b\n", 6, "already on line 5"),
            ("< PARAM TYPE=CLOCK NAME=GPU >\n", 4, "duplicate PARAM GPU"),
            ("GPU MAX_FREQ 1 # comment\n", 4, "setting must be"),
            ("< POWER_MODEL ID=2 >\n", 4, "lacks the NAME="),
            ("< POWER_MODEL ID=2 NAME=one >\n", 4, "duplicate mode one"),
            ("< POWER_MODEL ID=2 NAME=X COLOR=red >\n", 4, "unknown attribute COLOR="),
            ("< POWER_MODEL ID=2 NAME=MODE\u{0}15W >\n", 4, "NAME=\"MODE\\015W\" holds a control character"),
            ("< POWER_MODEL ID=2 NAME=M\u{1b}[31m >\n", 4, "holds a control character"),
            ("< PM_CONFIG DEFAULT=1 DEFAULT=1 >\n", 4, "given twice"),
            ("< PM_CONFIG DEFAULT=1 >\n", 5, "duplicate PM_CONFIG"),
            ("< PM_CONFIG DEFAULT= >\n", 4, "not KEY=VALUE"),
            ("< >\n", 4, "empty block header"),
            ("<\n", 4, "not closed"),
            ("<é ü=ö\n", 4, "not closed"),
        ] {
            fails(&conf(middle), line, "Syntax", detail);
        }
    }

    /// Loads a real NVIDIA conf from `$JPOWER_REFERENCE_DIR/nvpmodel` (default `../shared`);
    /// `None`, after saying so, when that directory is absent.
    fn reference(file: &str, test: &str) -> Option<NvpConfig> {
        let dir = crate::support::reference::locate("nvpmodel", test)?;
        Some(NvpConfig::load(&dir.join(file)).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Checks each line of `expect`: `MODE PARAM ARG VALUE` (the Debug of the setting's value, or
    /// `unset`) or `path PARAM ARG PATH` (the declared path).
    fn check(cfg: &NvpConfig, expect: &str) {
        for line in expect.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let &[mode, param, arg, want] = fields.as_slice() else {
                panic!("bad expectation {line}")
            };
            let got = if mode == "path" {
                let arg = cfg.param(param).and_then(|p| p.arg(arg));
                arg.map_or("undeclared".into(), |a| a.path.clone())
            } else {
                let setting = cfg.mode_by_name(mode).and_then(|m| m.setting(param, arg));
                setting.map_or("unset".into(), |s| format!("{:?}", s.value))
            };
            assert_eq!(got, want, "{line}");
        }
    }

    /// `ID NAME` of every mode, comma separated.
    fn modes(cfg: &NvpConfig) -> String {
        let modes: Vec<String> = cfg
            .modes
            .iter()
            .map(|m| format!("{} {}", m.id, m.name))
            .collect();
        modes.join(", ")
    }

    /// Expected settings and paths of `nvpmodel_p3701_0000.conf` (see [`check`]).
    const P3701_0000: &str = r#"
MAXN CPU_A78_0 MAX_FREQ Int(-1)
MODE_15W GPU MAX_FREQ Int(408000000)
MODE_15W TPC_POWER_GATING TPC_PG_MASK Text("248")
MAXN GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN Text("on")
MODE_15W CPU_A78_2 MAX_FREQ unset
path EMC MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap
path GPU MAX_FREQ_KNEXT /sys/devices/17000000.ga10b/devfreq_dev/max_freq
"#;

    /// Expected settings and paths of `nvpmodel_t194.conf` (see [`check`]); `NALL_PVA_VPS` is
    /// NVIDIA's spelling, kept as is.
    const T194: &str = r#"
MODE_10W TPC_POWER_GATING TPC_PG_MASK Text("5")
MODE_10W CPU_DENVER_0 MAX_FREQ Int(1200000)
MODE_10W CPU_DENVER_1 MAX_FREQ unset
MAXN NALL_PVA_VPS MAX_FREQ Int(-1)
"#;

    /// Expected settings and paths of `nvpmodel_t186.conf` (see [`check`]).
    const T186: &str = r#"
MAXN CPU_DENVER MAX_FREQ Int(-1)
MAXP_CORE_ALL CPU_DENVER MAX_FREQ Int(1400000)
MAXQ CPU_ONLINE CORE_1 Text("0")
MAXQ CPU_DENVER MAX_FREQ unset
MAXP_CORE_ARM CPU_DENVER MIN_FREQ unset
MAXN CPU_ONLINE CORE_0 unset
path CPU_ONLINE CORE_0 /sys/devices/system/cpu/cpu0/online
path TPC_POWER_GATING TPC_PG_MASK undeclared
path GPU MAX_FREQ_KNEXT /sys/devices/17000000.gp10b/devfreq/devfreq0/max_freq
"#;

    #[test]
    fn reference_p3701_agx_orin() {
        let Some(cfg) = reference("nvpmodel_p3701_0000.conf", "reference_p3701_agx_orin") else {
            return;
        };
        assert_eq!(modes(&cfg), "0 MAXN, 1 MODE_15W, 2 MODE_30W, 3 MODE_50W");
        assert_eq!((cfg.default_mode, cfg.params.len()), (2, 15));
        assert_eq!(cfg.fan_default, None);
        check(&cfg, P3701_0000);
        let emc = cfg.param("EMC").map(|p| (p.ty, p.line)); // `<PARAM TYPE=CLOCK NAME=EMC >`
        assert_eq!(emc, Some((ParamType::Clock, 99)));
        let counts: Vec<usize> = cfg.modes.iter().map(|m| m.settings.len()).collect();
        assert_eq!(counts, [30, 26, 28, 30]);
        let first = &cfg.modes[0].settings[0]; // settings keep file order
        assert_eq!((first.param.as_str(), first.line), ("CPU_ONLINE", 135));
    }

    #[test]
    fn reference_t194_agx_xavier() {
        let Some(cfg) = reference("nvpmodel_t194.conf", "reference_t194_agx_xavier") else {
            return;
        };
        let expected = "0 MAXN, 1 MODE_10W, 2 MODE_15W, 3 MODE_30W_ALL, 4 MODE_30W_6CORE, \
                        5 MODE_30W_4CORE, 6 MODE_30W_2CORE, 7 MODE_15W_DESKTOP";
        assert_eq!(modes(&cfg), expected);
        assert_eq!((cfg.default_mode, cfg.params.len()), (7, 25)); // stock L4T defaults to 2
        check(&cfg, T194);
    }

    #[test]
    fn reference_t186_tx2() {
        let Some(cfg) = reference("nvpmodel_t186.conf", "reference_t186_tx2") else {
            return;
        };
        let expected = "0 MAXN, 1 MAXQ, 2 MAXP_CORE_ALL, 3 MAXP_CORE_ARM";
        assert_eq!(modes(&cfg), expected);
        assert_eq!((cfg.default_mode, cfg.params.len()), (2, 7));
        // MAXQ and MAXP_CORE_ARM take the Denver cores (1-2) offline and leave CPU_DENVER unset;
        // CORE_0 is declared but no mode sets it; TX2 has no TPC_POWER_GATING.
        check(&cfg, T186);
        let sets_core0 = |m: &PowerModel| m.setting("CPU_ONLINE", "CORE_0").is_some();
        assert!(!cfg.modes.iter().any(sets_core0));
    }
}
