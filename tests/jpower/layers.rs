//! The house rules, checked: every module of `agent/` is parsed (`syn`), every path it
//! names (`use` trees with their groups, `crate::`, `super::` and `self::` paths inline in
//! code and types) is resolved to the top-level module it reaches, and each must be one
//! its layer may import. The table below is the picture `agent/lib.rs` draws.
//!
//! Code under `#[cfg(test)]` may also name the simulator: tests, like the CLI, choose the
//! board they run on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Each layer and the layers it may import (its own is always allowed).
const LAYERS: &[(&str, &[&str])] = &[
    ("support", &[]),
    ("board", &["support"]),
    ("control", &["support", "board"]),
    ("telemetry", &["support", "board", "control"]),
    ("ipc", &["support", "board", "control", "telemetry"]),
    (
        "daemon",
        &["support", "board", "control", "telemetry", "ipc"],
    ),
    ("gpu", &["support", "board", "control", "telemetry"]),
    (
        "predict",
        &["support", "board", "control", "telemetry", "ipc", "gpu"],
    ),
    (
        "sim",
        &[
            "support",
            "board",
            "control",
            "telemetry",
            "ipc",
            "gpu",
            "predict",
        ],
    ),
    (
        "cli",
        &[
            "support",
            "board",
            "control",
            "telemetry",
            "ipc",
            "daemon",
            "gpu",
            "predict",
            "sim",
        ],
    ),
];

/// Modules that import nothing else of the crate: the wire types any client re-implements.
const SELF_CONTAINED: &[&str] = &["ipc::protocol"];

/// The module path of a source file (`agent/board/sysfs.rs` is `board::sysfs`).
fn module_of(file: &Path, src: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// One import: where it is written, and the crate module path it reaches.
#[derive(Debug)]
struct Edge {
    file: PathBuf,
    line: usize,
    target: Vec<String>,
    in_test: bool,
}

struct Collector<'a> {
    file: &'a Path,
    /// The module the code being visited is in (grows inside inline `mod` items).
    module: Vec<String>,
    test_depth: usize,
    edges: Vec<Edge>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                l.tokens
                    .to_string()
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|w| w == "test")
            })
    })
}

impl Collector<'_> {
    /// Resolves `segments` (as written) to a crate path, if it names the crate.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut out = self.module.clone();
        let mut rest = segments;
        match rest.first()?.as_str() {
            "crate" => {
                out.clear();
                rest = &rest[1..];
            }
            "super" | "self" => {
                while let Some(s) = rest.first() {
                    match s.as_str() {
                        "super" => {
                            out.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        out.extend(rest.iter().cloned());
        Some(out)
    }

    fn push(&mut self, segments: &[String], line: usize) {
        if let Some(target) = self.resolve(segments) {
            self.edges.push(Edge {
                file: self.file.to_path_buf(),
                line,
                target,
                in_test: self.test_depth > 0,
            });
        }
    }

    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                prefix.push(n.ident.to_string());
                self.push(&prefix.clone(), line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                let line = r.ident.span().start().line;
                prefix.push(r.ident.to_string());
                self.push(&prefix.clone(), line);
                prefix.pop();
            }
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                self.push(&prefix.clone(), line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let test = is_cfg_test(&u.attrs);
        self.test_depth += usize::from(test);
        self.use_tree(&u.tree, &mut Vec::new());
        self.test_depth -= usize::from(test);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let test = is_cfg_test(&m.attrs);
        self.test_depth += usize::from(test);
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
        self.test_depth -= usize::from(test);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let test = is_cfg_test(&f.attrs);
        self.test_depth += usize::from(test);
        syn::visit::visit_item_fn(self, f);
        self.test_depth -= usize::from(test);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let test = is_cfg_test(&i.attrs);
        self.test_depth += usize::from(test);
        syn::visit::visit_item_impl(self, i);
        self.test_depth -= usize::from(test);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            let line = p.segments[0].ident.span().start().line;
            self.push(&segments, line);
        }
        syn::visit::visit_path(self, p);
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import of the crate's sources, resolved.
fn edges() -> Vec<(Vec<String>, Edge)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let module = module_of(&file, &src);
        let mut c = Collector {
            file: &file,
            module: module.clone(),
            test_depth: 0,
            edges: Vec::new(),
        };
        c.visit_file(&ast);
        out.extend(c.edges.into_iter().map(|e| (module.clone(), e)));
    }
    out
}

/// Why `from` may not reach `edge.target`, if it may not.
fn violation(from: &[String], edge: &Edge) -> Option<String> {
    let (Some(src), Some(dst)) = (from.first(), edge.target.first()) else {
        return None;
    };
    let from_path = from.join("::");
    if SELF_CONTAINED
        .iter()
        .any(|m| from_path == *m || from_path.starts_with(&format!("{m}::")))
        && !edge.target.join("::").starts_with(&from_path)
    {
        return Some(format!("{from_path} is self-contained"));
    }
    if src == dst {
        return None;
    }
    if edge.in_test && dst == "sim" {
        return None;
    }
    let Some((_, allowed)) = LAYERS.iter().find(|(l, _)| l == src) else {
        return Some(format!("{src} is in no layer of the table"));
    };
    if !LAYERS.iter().any(|(l, _)| l == dst) {
        // A name at the crate root that is not a module (none today): not a layer edge.
        return None;
    }
    (!allowed.contains(&dst.as_str())).then(|| format!("{src} may not import {dst}"))
}

#[test]
fn no_layer_imports_one_above_it() {
    let mut bad = BTreeSet::new();
    for (from, edge) in edges() {
        if let Some(why) = violation(&from, &edge) {
            bad.insert(format!(
                "{}:{}: {} ({why})",
                edge.file
                    .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap()
                    .display(),
                edge.line,
                edge.target.join("::")
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} forbidden imports:\n{}",
        bad.len(),
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn every_top_level_module_is_a_layer() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("agent/lib.rs"))
        .unwrap();
    let ast = syn::parse_file(&lib).unwrap();
    for item in ast.items {
        if let syn::Item::Mod(m) = item {
            let name = m.ident.to_string();
            assert!(
                LAYERS.iter().any(|(l, _)| *l == name),
                "agent/lib.rs declares `{name}`, which is in no layer of tests/jpower/layers.rs"
            );
        }
    }
}

#[test]
fn the_checker_sees_every_form_of_import() {
    let src = r#"
        use crate::{board::{self, Board}, sim};
        mod inner {
            fn f() { let _ = super::super::super::daemon::x(); let _: crate::cli::T; }
        }
        #[cfg(test)]
        mod tests { use crate::sim::spec; }
    "#;
    let ast = syn::parse_file(src).unwrap();
    let mut c = Collector {
        file: Path::new("agent/telemetry/ring.rs"),
        module: vec!["telemetry".into(), "ring".into()],
        test_depth: 0,
        edges: Vec::new(),
    };
    c.visit_file(&ast);
    let from = vec!["telemetry".to_string(), "ring".to_string()];
    let found: BTreeSet<String> = c
        .edges
        .iter()
        .filter_map(|e| violation(&from, e).map(|_| e.target.join("::")))
        .collect();
    let expected: BTreeSet<String> = ["sim", "daemon::x", "cli::T"].map(String::from).into();
    assert_eq!(
        found, expected,
        "grouped, inline and super::super paths all count; tests may name sim"
    );
}
