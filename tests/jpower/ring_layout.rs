//! The ring layout has one source of truth, `agent/telemetry/ring/layout.rs`; these tests
//! hold the C header, the Python reader and the document to it, field by field (offset and
//! size), so that none of them can drift.

use jpower::telemetry::ring::layout::{self, Field, STRUCTS};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn project(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The Rust layout as `(struct, field) -> (offset, size)`.
fn rust() -> BTreeMap<(String, String), (usize, usize)> {
    STRUCTS
        .iter()
        .flat_map(|(_, _, fields)| fields.iter())
        .map(|f: &Field| ((f.within.into(), f.name.into()), (f.offset, f.size)))
        .collect()
}

#[test]
fn the_c_header_has_the_rust_layout() {
    let c_name = |within: &str| match within {
        "header" => "jp_ring_header",
        "rail" => "jp_ring_rail_entry",
        "zone" => "jp_ring_zone_entry",
        "slot" => "jp_ring_slot",
        "slot_rail" => "jp_ring_slot_rail",
        "writer" => "jp_ring_writer_section",
        "activity" => "jp_ring_activity_section",
        "activity_cpu" => "jp_ring_activity_cpu",
        "activity_disk" => "jp_ring_activity_disk",
        other => panic!("no C struct for {other}"),
    };
    let mut src =
        String::from("#include <stdio.h>\n#include \"jpower_ring.h\"\nint main(void) {\n");
    for (within, size, fields) in STRUCTS {
        let s = c_name(within);
        src += &format!("printf(\"{within} . 0 %zu\\n\", sizeof({s}));\n");
        for f in fields {
            src += &format!(
                "printf(\"{within} {n} %zu %zu\\n\", offsetof({s}, {n}), sizeof((({s} *)0)->{n}));\n",
                n = f.name
            );
        }
        let _ = size;
    }
    src += "return 0; }\n";
    let dir = tempfile::tempdir().unwrap();
    let (c, exe) = (dir.path().join("layout.c"), dir.path().join("layout"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Werror", "-I"])
        .arg(project("include"))
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (set CC to a C compiler)"));
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    let want = rust();
    let sizes: BTreeMap<&str, usize> = STRUCTS.iter().map(|(w, s, _)| (*w, *s)).collect();
    for line in out.lines() {
        let v: Vec<&str> = line.split(' ').collect();
        let (off, size): (usize, usize) = (v[2].parse().unwrap(), v[3].parse().unwrap());
        if v[1] == "." {
            assert_eq!(sizes[v[0]], size, "sizeof {}", c_name(v[0]));
        } else {
            let key = (v[0].to_string(), v[1].to_string());
            assert_eq!(
                want[&key],
                (off, size),
                "C {}.{} (offset, size)",
                v[0],
                v[1]
            );
        }
    }
}

#[test]
fn the_python_reader_has_the_rust_layout() {
    // The reader's struct formats, item by item, and its constants.
    let script = r#"
import importlib.util, json, struct, sys
spec = importlib.util.spec_from_file_location("jpower_ring", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
def items(s):
    fmt, out, pos, i = s.format, [], 0, 1
    while i < len(fmt):
        j = i
        while fmt[j].isdigit(): j += 1
        code = fmt[i:j + 1]
        size = struct.calcsize("<" + code)
        off = struct.calcsize(fmt[:j + 1]) - size
        out.append([off, size]); i = j + 1
    return out
print(json.dumps({
    "formats": {w: items(getattr(m, n)) for w, n in [("header", "_HEADER"), ("rail", "_RAIL"),
        ("zone", "_ZONE"), ("slot", "_SLOT_HEAD"), ("slot_rail", "_SLOT_RAIL"), ("writer", "_WRITER"),
        ("activity", "_ACTIVITY"), ("activity_cpu", "_ACTIVITY_CPU"), ("activity_disk", "_ACTIVITY_DISK")]},
    "constants": {n: getattr(m, n) for n in dir(m) if n.isupper() and isinstance(getattr(m, n), int)},
}))
"#;
    let out = crate::util::python(script, &project("tools/jpower_ring.py"));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    for (within, size, fields) in STRUCTS {
        let got = v["formats"][within].as_array().unwrap();
        // The header's format covers its fields up to the tables, which have their own.
        let covered = if within == "header" { 21 } else { fields.len() };
        assert_eq!(got.len(), covered, "items of Python's {within} format");
        for (f, item) in fields.iter().zip(got) {
            assert_eq!(
                (
                    item[0].as_u64().unwrap() as usize,
                    item[1].as_u64().unwrap() as usize
                ),
                (f.offset, f.size),
                "Python {within}.{}",
                f.name
            );
        }
        if within != "header" {
            let end = fields.last().map_or(0, |f| f.offset + f.size);
            assert_eq!(end, size, "Python's {within} format spans the struct");
        }
    }
    let off = |within: &str, name: &str| rust()[&(within.to_string(), name.to_string())].0;
    let c = &v["constants"];
    let expect: [(&str, usize); 24] = [
        ("VERSION", layout::VERSION as usize),
        ("HEADER_SIZE", layout::HEADER_SIZE),
        ("MAX_RAILS", layout::MAX_RAILS),
        ("MAX_ZONES", layout::MAX_ZONES),
        ("SLOT_HEAD_SIZE", layout::slot_size(0)),
        ("SLOT_RAIL_SIZE", std::mem::size_of::<layout::SlotRail>()),
        ("_OFF_VERSION", off("header", "version")),
        ("_OFF_WRITE_SEQ", off("header", "write_seq")),
        ("_OFF_OVERRUNS", off("header", "overruns")),
        ("_OFF_READ_ERRORS", off("header", "read_errors")),
        ("_OFF_THROTTLE", off("header", "throttle")),
        ("_OFF_RAILS", off("header", "rails")),
        ("_OFF_ZONES", off("header", "thermal")),
        ("_OFF_RAIL_FRESH_COUNT", off("rail", "fresh_count")),
        ("_OFF_RAIL_LAST_FRESH", off("rail", "last_fresh_ns")),
        ("EXT_OFFSET", off("header", "ext")),
        ("SECTION_WRITER", layout::SECTION_WRITER as usize),
        ("WRITER_LIVE", layout::WRITER_LIVE as usize),
        ("WRITER_CLOSED", layout::WRITER_CLOSED as usize),
        ("WRITER_REPLACED", layout::WRITER_REPLACED as usize),
        ("SECTION_ACTIVITY", layout::SECTION_ACTIVITY as usize),
        ("ACTIVITY_ABSENT_U32", layout::ABSENT_U32 as usize),
        ("ACTIVITY_ABSENT_U64", layout::ABSENT_U64 as usize),
        (
            "RAIL_FAILED_SHIFT",
            jpower::telemetry::flags::RAIL_FAILED_SHIFT as usize,
        ),
    ];
    for (name, want) in expect {
        assert_eq!(c[name].as_u64(), Some(want as u64), "Python's {name}");
    }
}

/// The size of a type as the document writes it (`u32`, `u8[24]`, `rail[16]`).
fn doc_size(ty: &str) -> usize {
    let (base, count) = match ty.split_once('[') {
        Some((b, n)) => (b, n.trim_end_matches(']').parse::<usize>().unwrap()),
        None => (ty, 1),
    };
    let one = match base {
        "u8" | "i8" => 1,
        "u32" | "i32" => 4,
        "u64" | "i64" => 8,
        "rail" => 64,
        "zone" => 32,
        other => panic!("unknown type {other} in docs/telemetry-ring.md"),
    };
    one * count
}

#[test]
fn the_document_has_the_rust_layout() {
    let doc = std::fs::read_to_string(project("docs/telemetry-ring.md")).unwrap();
    let mut within: Option<&str> = None;
    let mut seen = BTreeMap::new();
    for line in doc.lines() {
        if line.starts_with('#') {
            within = [
                ("## Header", "header"),
                ("### Rail entry", "rail"),
                ("### Thermal zone entry", "zone"),
                ("## Slots", "slot"),
                ("### Slot rail", "slot_rail"),
                ("### Writer section", "writer"),
                ("### Activity section", "activity"),
                ("#### Activity CPU entry", "activity_cpu"),
                ("#### Activity disk entry", "activity_disk"),
            ]
            .iter()
            .find(|(h, _)| line.starts_with(h))
            .map(|(_, w)| *w);
            continue;
        }
        let (Some(w), Some(row)) = (within, line.strip_prefix('|')) else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(|c| c.trim().trim_matches('`')).collect();
        let Ok(offset) = cells[0].parse::<usize>() else {
            continue;
        };
        if cells[2].is_empty() {
            continue; // the rails after a slot's head: their own table
        }
        seen.insert(
            (w.to_string(), cells[2].to_string()),
            (offset, doc_size(cells[1])),
        );
    }
    assert_eq!(
        seen,
        rust(),
        "docs/telemetry-ring.md against the Rust layout"
    );
}
