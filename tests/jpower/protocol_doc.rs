//! `docs/protocol.md` against the protocol's types: every example message decodes as the
//! types say, the version in the title and the changelog is the one `hello` speaks, and
//! the bincode examples' bytes and lengths are what the encoder writes.

use jpower::ipc::codec::{encode, Encoding};
use jpower::ipc::protocol::*;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md")).unwrap()
}

/// The first JSON value of `text` (example lines may carry a comment after it).
fn first_json(text: &str) -> serde_json::Value {
    serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .next()
        .unwrap_or_else(|| panic!("no JSON in {text}"))
        .unwrap_or_else(|e| panic!("bad JSON ({e}) in {text}"))
}

fn bincode(msg: &impl serde::Serialize) -> Vec<u8> {
    let mut out = Vec::new();
    encode(Encoding::Bincode, msg, &mut out).unwrap();
    out
}

/// The length a doc line `00 00 01 52   frame length: 338` states, checked against its
/// own first bytes.
fn stated_length(doc: &str, marker: &str) -> usize {
    let line = doc
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no line with {marker}"));
    let (hex, rest) = line.split_once("frame length: ").unwrap();
    let n: usize = rest.split_whitespace().next().unwrap().parse().unwrap();
    let be = u32::from_str_radix(&hex.split_whitespace().collect::<String>(), 16).unwrap();
    assert_eq!(be as usize, n, "{line}");
    n
}

#[test]
fn the_protocol_doc_agrees_with_the_types() {
    let doc = doc();
    assert!(
        doc.starts_with(&format!(
            "# The agent's socket protocol (version {PROTOCOL_VERSION})"
        )),
        "the title names another version than PROTOCOL_VERSION"
    );
    assert!(
        doc.contains(&format!("### Version {PROTOCOL_VERSION}\n")),
        "the changelog has no entry for version {PROTOCOL_VERSION}"
    );

    // Every example exchange: requests decode as Request (unless the agent's answer is the
    // id-0 bad_request that closes the connection), replies as Reply.
    let lines: Vec<&str> = doc.lines().collect();
    let (mut requests, mut replies) = (0, 0);
    for (i, line) in lines.iter().enumerate() {
        if let Some(json) = line.strip_prefix("-> {") {
            let value = first_json(&format!("{{{json}"));
            let refused = lines[i + 1..]
                .iter()
                .find(|l| l.starts_with("<- "))
                .is_some_and(|l| l.contains(r#"{"id":0,"body":{"error":{"code":"bad_request""#));
            let parsed = serde_json::from_value::<Request>(value);
            assert!(
                parsed.is_ok() || refused,
                "the doc's request does not decode: {line}: {parsed:?}"
            );
            requests += 1;
        } else if let Some(json) = line.strip_prefix("<- {") {
            let value = first_json(&format!("{{{json}"));
            if let Err(e) = serde_json::from_value::<Reply>(value) {
                panic!("the doc's reply does not decode: {line}: {e}");
            }
            replies += 1;
        }
    }
    assert!(
        requests >= 25 && replies >= 30,
        "{requests} requests, {replies} replies"
    );

    // The status reply shown under `status`, with id 1, is the worked example's frame.
    let status = lines
        .iter()
        .find_map(|l| l.strip_prefix(r#"<- {"id":2,"body":{"status""#))
        .expect("the status example");
    let mut reply: Reply = serde_json::from_value(first_json(&format!(
        r#"{{"id":2,"body":{{"status"{status}"#
    )))
    .unwrap();
    reply.id = 1;
    let frame = bincode(&reply);
    assert_eq!(
        frame.len() - 4,
        stated_length(&doc, "frame length: 331"),
        "the status frame's length"
    );
    assert!(doc.contains(&format!("is this {}-byte frame", frame.len())));

    // The hello frame, byte for byte.
    let hello = bincode(&Request {
        id: 1,
        body: RequestBody::Hello {
            version: PROTOCOL_VERSION,
            client: "me".into(),
        },
    });
    let para = doc
        .split("\n\n")
        .find(|p| p.contains("is the frame\n`00 00 00 1a`"))
        .expect("the hello frame");
    let shown: String = para
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|g| g.chars().all(|c| c.is_ascii_hexdigit() || c == ' '))
        .flat_map(|g| g.split_whitespace())
        .collect();
    let hex: String = hello.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(shown, hex, "the hello frame's bytes");

    // The error frame for an oversized header.
    let error = bincode(&Reply::error(
        0,
        ErrorCode::BadRequest,
        "frame of 65537 bytes exceeds the 64 KiB limit",
    ));
    assert_eq!(error.len() - 4, stated_length(&doc, "frame length: 69"));
}

#[test]
fn the_protocol_doc_shows_the_python_examples_verbatim() {
    let doc = doc();
    for name in ["fulcrum_train.py", "fulcrum_infer.py"] {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/python/examples/");
        let source = std::fs::read_to_string(format!("{path}{name}")).unwrap();
        assert!(
            doc.contains(&format!("```python\n{source}```")),
            "docs/protocol.md does not show python/examples/{name} as it is"
        );
    }
}
