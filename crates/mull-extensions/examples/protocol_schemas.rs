//! Prints the generated schema section of docs/extension-protocol.md, or with `--write`
//! replaces that section in the file.

use std::path::Path;

use anyhow::{bail, Context};
use mull_extensions::protocol::{schemas_markdown, SCHEMAS_BEGIN, SCHEMAS_END};

fn main() -> anyhow::Result<()> {
    let section = schemas_markdown();
    if std::env::args().nth(1).as_deref() != Some("--write") {
        println!("{section}");
        return Ok(());
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/extension-protocol.md");
    let doc =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let (Some(start), Some(end)) = (doc.find(SCHEMAS_BEGIN), doc.find(SCHEMAS_END)) else {
        bail!(
            "{} has no schemas:begin / schemas:end markers",
            path.display()
        );
    };
    let updated = format!(
        "{}{section}{}",
        &doc[..start],
        &doc[end + SCHEMAS_END.len()..]
    );
    std::fs::write(&path, updated).with_context(|| format!("writing {}", path.display()))?;
    println!("updated {}", path.display());
    Ok(())
}
