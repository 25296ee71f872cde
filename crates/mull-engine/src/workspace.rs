//! The workspace: a directory the agent's turns may read and write through three tools
//! (`read_file`, `write_file`, `list_files`), the first layer of Think's tool merge
//! (workspace → agent → session → MCP → client → caller; a later layer wins on a name clash).
//! An agent offers one by returning it from [`Agent::workspace`](crate::Agent::workspace).
//!
//! Every path is relative to the workspace's root and must stay inside it: an absolute path, a
//! `..` step, or a symbolic link leading out is refused as a tool error the model sees. The
//! calls go through `before_tool_call` like any tool, so an agent can block writes.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::tool::{Tool, ToolError, ToolExecution, ToolOutput, ToolSet};

/// Longest file `read_file` returns whole, in bytes; longer files are refused with their size.
pub const MAX_READ_BYTES: u64 = 256 * 1024;

/// A directory offered to the model as the workspace tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace rooted at `root` (created on the first write when missing).
    pub fn new(root: impl Into<PathBuf>) -> Workspace {
        Workspace { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace's tools.
    pub fn tools(&self) -> ToolSet {
        let root = Arc::new(self.root.clone());
        ToolSet::new()
            .with(Arc::new(ReadFile(Arc::clone(&root))) as Arc<dyn Tool>)
            .with(Arc::new(WriteFile(Arc::clone(&root))) as Arc<dyn Tool>)
            .with(Arc::new(ListFiles(root)) as Arc<dyn Tool>)
    }
}

/// `relative` under `root`, refused when it could leave it.
fn resolve(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let path = Path::new(relative);
    let lexical_ok = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if relative.is_empty() || !lexical_ok {
        return Err(format!(
            "path {relative:?} is not inside the workspace: give a relative path without `..`"
        )
        .into());
    }
    let joined = root.join(path);
    // A symbolic link inside the root may still point out of it: check what exists.
    let existing = joined
        .ancestors()
        .find(|p| p.exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.to_path_buf());
    if let (Ok(real), Ok(real_root)) = (existing.canonicalize(), root.canonicalize()) {
        if !real.starts_with(&real_root) {
            return Err(format!("path {relative:?} leads out of the workspace").into());
        }
    }
    Ok(joined)
}

fn path_arg(input: &Value) -> &str {
    input.get("path").and_then(Value::as_str).unwrap_or("")
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| -> ToolError { format!("the file operation stopped: {e}").into() })?
}

struct ReadFile(Arc<PathBuf>);
struct WriteFile(Arc<PathBuf>);
struct ListFiles(Arc<PathBuf>);

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Reads a UTF-8 text file of the workspace."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Relative to the workspace."}},
            "required": ["path"],
            "additionalProperties": false
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let relative = path_arg(&input).to_owned();
        let path = resolve(&self.0, &relative)?;
        let text = blocking(move || {
            let size = std::fs::metadata(&path)
                .map_err(|e| format!("cannot read {relative:?}: {e}"))?
                .len();
            if size > MAX_READ_BYTES {
                return Err(format!(
                    "{relative:?} has {size} bytes, more than the {MAX_READ_BYTES} read_file returns"
                )
                .into());
            }
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {relative:?}: {e}").into())
        })
        .await?;
        Ok(ToolOutput::Value(json!({"content": text})))
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Writes a UTF-8 text file of the workspace, creating folders as needed and replacing \
         the file when it exists."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Relative to the workspace."},
                "content": {"type": "string"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let relative = path_arg(&input).to_owned();
        let content = input
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let path = resolve(&self.0, &relative)?;
        let bytes = content.len();
        blocking(move || {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create the folder of {relative:?}: {e}"))?;
            }
            std::fs::write(&path, content)
                .map_err(|e| format!("cannot write {relative:?}: {e}").into())
        })
        .await?;
        Ok(ToolOutput::Value(json!({"written": bytes})))
    }
}

#[async_trait]
impl Tool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }
    fn description(&self) -> &str {
        "Lists the files and folders of a workspace folder (the root when no path is given)."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Relative to the workspace."}},
            "additionalProperties": false
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let relative = input.get("path").and_then(Value::as_str).unwrap_or(".");
        let relative = if relative.is_empty() { "." } else { relative }.to_owned();
        let path = resolve(&self.0, &relative)?;
        let mut entries = blocking(move || {
            let read = match std::fs::read_dir(&path) {
                Ok(read) => read,
                // An empty workspace has no root folder yet.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && relative == "." => {
                    return Ok(Vec::new())
                }
                Err(e) => return Err(format!("cannot list {relative:?}: {e}").into()),
            };
            let mut out = Vec::new();
            for entry in read {
                let entry = entry.map_err(|e| format!("cannot list {relative:?}: {e}"))?;
                let dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                let mut name = entry.file_name().to_string_lossy().into_owned();
                if dir {
                    name.push('/');
                }
                out.push(name);
            }
            Ok(out)
        })
        .await?;
        entries.sort();
        Ok(ToolOutput::Value(json!({"entries": entries})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_inside_the_root() {
        let root = Path::new("/nonexistent-mull-root");
        assert!(resolve(root, "notes/a.txt").is_ok());
        assert!(resolve(root, "./a.txt").is_ok());
        for bad in ["", "../a", "notes/../../a", "/etc/passwd"] {
            let error = resolve(root, bad).expect_err(bad).to_string();
            assert!(error.contains("not inside the workspace"), "{bad}: {error}");
        }
    }
}
