//! `jpower flops` (and the planner built on it): the analytical model through the real
//! binary, its JSON, and one-line errors for bad model files.

use crate::util::{self, jpower, json, ok, run};

fn one_line_error(args: &[&str], needle: &str) {
    let rt = util::runtime();
    let out = run(jpower(rt.path()).args(args));
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("jpower: error: ") && err.contains(needle),
        "{args:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn flops_counts_the_zoo_and_scales_with_batch_and_training() {
    let rt = util::runtime();
    let count = |args: &[&str]| json(&ok(jpower(rt.path()).args(["--json", "flops"]).args(args)));
    let one = count(&["resnet50"]);
    let total = &one["total"];
    // torchvision: 4.09 G multiply-accumulates, 25,557,032 parameters at 224x224.
    let macs = total["macs"].as_f64().unwrap();
    assert!((macs / 4.089e9 - 1.0).abs() < 0.01, "{total}");
    assert_eq!(total["params"], 25_557_032);
    assert_eq!(one["layers"][0]["op"], "conv2d");
    let train = count(&["resnet50", "--batch", "8", "--train", "--precision", "fp16"]);
    assert_eq!(train["precision"], "f16");
    assert_eq!(
        train["total"]["flops"].as_u64().unwrap(),
        3 * 8 * total["flops"].as_u64().unwrap()
    );
    let text = ok(jpower(rt.path()).args(["flops", "mobilenetv3-large"]));
    assert!(text.contains("depthwise_conv2d"), "{text}");
    assert!(text.contains("total: ") && text.contains("MMACs"), "{text}");
}

#[test]
fn flops_reads_a_layer_list_and_rejects_bad_ones_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tiny.json");
    std::fs::write(
        &good,
        r#"{"version": 1, "name": "tiny", "input": [3, 8, 8], "layers": [
  {"name": "conv", "op": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "relu", "op": "relu"}
]}"#,
    )
    .unwrap();
    let rt = util::runtime();
    let r = json(&ok(jpower(rt.path()).args([
        "--json",
        "flops",
        good.to_str().unwrap(),
        "--batch",
        "2",
    ])));
    // 2 x 4 x 8 x 8 outputs of 3 x 3 x 3 MACs; ReLU one FLOP an element.
    assert_eq!(r["layers"][0]["counts"]["macs"], 2 * 4 * 64 * 27);
    assert_eq!(r["total"]["flops"], 2 * 2 * 4 * 64 * 27 + 2 * 4 * 64);
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        "{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"conv2d\", \"kernel\": 3}\n]}",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    one_line_error(
        &["flops", bad],
        &format!("{bad}:2: layer \"a\": missing field `out_channels`"),
    );
    one_line_error(&["flops", "nonet"], "neither a built-in model");
    one_line_error(&["flops", "model.onnx"], "ONNX models are not read yet");
}
