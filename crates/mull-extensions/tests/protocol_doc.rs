//! docs/extension-protocol.md carries the JSON schema of every snapshot, reply and host call;
//! this test fails when they no longer match the types on the wire.

use std::path::Path;

use mull_extensions::protocol::{schemas_markdown, SCHEMAS_BEGIN, SCHEMAS_END};

#[test]
fn the_protocol_doc_schemas_are_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/extension-protocol.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc
        .find(SCHEMAS_BEGIN)
        .expect("the doc has the schemas:begin marker");
    let end = doc
        .find(SCHEMAS_END)
        .expect("the doc has the schemas:end marker")
        + SCHEMAS_END.len();
    let current = schemas_markdown();
    assert!(
        doc[start..end] == current,
        "{} has stale schemas; regenerate the section with \
         `cargo run -p mull-extensions --example protocol_schemas -- --write`",
        path.display()
    );
}
