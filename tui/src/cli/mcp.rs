//! MCP servers for `mull chat`, `mull serve` and `mull demo`: `--mcp NAME=COMMAND…` (a child
//! process over stdio) or `--mcp NAME=URL` (streamable HTTP), repeatable, and `--mcp-config
//! FILE` in the `mcpServers` JSON shape other MCP clients read:
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]},
//!   "docs":  {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
//! }}
//! ```
//!
//! `${NAME}` in a header or environment value is read from the environment, so a token stays
//! out of the file. Every server's tools join every turn of the session as
//! `tool_<server>_<tool>` (see `mull-mcp`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use mull::engine::{SessionOptions, ToolSource};
use mull::mcp::{McpServer, McpTransport};
use serde::Deserialize;

/// The MCP flags, shared by the commands that run turns.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct McpArgs {
    /// An MCP server whose tools the model may call: `NAME=COMMAND [ARGS…]` starts a child
    /// process over stdio (quoted as in a shell), `NAME=http(s)://…` reaches a streamable HTTP
    /// endpoint. Repeatable.
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL")]
    pub servers: Vec<String>,
    /// A JSON file of MCP servers: `{"mcpServers": {NAME: {"command", "args", "env", "cwd"} or
    /// {"url", "headers"}}}`; `${VAR}` in values is read from the environment.
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl McpArgs {
    /// The servers the flags and the file name, checked (names, headers, variables) before
    /// anything starts; none are started until a turn lists their tools.
    pub fn servers(&self) -> Result<Vec<Arc<dyn ToolSource>>> {
        let mut servers: Vec<McpServer> = Vec::new();
        if let Some(path) = &self.config {
            servers.extend(from_file(path)?);
        }
        for flag in &self.servers {
            servers.push(from_flag(flag)?);
        }
        let mut names = std::collections::HashSet::new();
        for server in &servers {
            if !names.insert(server.name().to_owned()) {
                bail!(
                    "two MCP servers are named {:?}: give each its own name",
                    server.name()
                );
            }
        }
        Ok(servers.into_iter().map(McpServer::shared).collect())
    }
}

/// `options` with every server of `servers` added.
pub fn with_servers(
    mut options: SessionOptions,
    servers: &[Arc<dyn ToolSource>],
) -> SessionOptions {
    for server in servers {
        options = options.with_mcp_server(Arc::clone(server));
    }
    options
}

/// One `--mcp NAME=…` value.
fn from_flag(flag: &str) -> Result<McpServer> {
    let Some((name, target)) = flag.split_once('=') else {
        bail!("--mcp {flag:?}: expected NAME=COMMAND [ARGS…] or NAME=URL, e.g. --mcp files=\"npx -y @modelcontextprotocol/server-filesystem .\"");
    };
    let target = target.trim();
    let transport = if target.starts_with("http://") || target.starts_with("https://") {
        McpTransport::http(target)
    } else {
        let words = shlex::split(target)
            .filter(|w| !w.is_empty())
            .with_context(|| {
                format!("--mcp {flag:?}: the command is empty or its quotes do not close")
            })?;
        let mut transport = McpTransport::stdio(words[0].clone());
        for arg in &words[1..] {
            transport = transport.arg(arg.clone());
        }
        transport
    };
    McpServer::new(name.trim(), transport).with_context(|| format!("--mcp {flag:?}"))
}

/// The `mcpServers` file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    mcp_servers: BTreeMap<String, ServerEntry>,
}

/// One server of the file: a command or a URL.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerEntry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Accepted for files written for other clients (`stdio`, `http`, `streamable-http`);
    /// the command or URL decides.
    #[serde(rename = "type")]
    _kind: Option<String>,
}

fn from_file(path: &Path) -> Result<Vec<McpServer>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the MCP config {}", path.display()))?;
    let file: ConfigFile = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not an MCP config: expected {{\"mcpServers\": {{NAME: {{\"command\": …, \"args\": […]}} \
             or {{\"url\": …, \"headers\": {{…}}}}}}}}",
            path.display()
        )
    })?;
    let mut servers = Vec::new();
    for (name, entry) in file.mcp_servers {
        let at = || format!("MCP server {name:?} in {}", path.display());
        let transport = match (entry.command, entry.url) {
            (Some(command), None) => {
                let mut transport = McpTransport::stdio(command);
                for arg in entry.args {
                    transport = transport.arg(arg);
                }
                for (key, value) in &entry.env {
                    transport = transport.env(key, expand(value).with_context(at)?);
                }
                if let Some(cwd) = entry.cwd {
                    transport = transport.current_dir(cwd);
                }
                transport
            }
            (None, Some(url)) => {
                let mut transport = McpTransport::http(url);
                for (header, value) in &entry.headers {
                    transport = transport.header(header, expand(value).with_context(at)?);
                }
                transport
            }
            _ => bail!("{}: give either \"command\" or \"url\"", at()),
        };
        servers.push(McpServer::new(name.clone(), transport).with_context(at)?);
    }
    Ok(servers)
}

/// `value` with each `${NAME}` replaced by the environment variable `NAME`.
fn expand(value: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            bail!("{value:?}: `${{` without a closing `}}`");
        };
        let name = &after[..end];
        let found = std::env::var(name)
            .with_context(|| format!("{value:?} names the variable {name}, which is not set"))?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_files_name_their_servers_and_bad_ones_are_refused() {
        let args = McpArgs {
            servers: vec![
                "files=npx -y \"@modelcontextprotocol/server-filesystem\" .".into(),
                "docs=http://127.0.0.1:9/mcp".into(),
            ],
            config: None,
        };
        let servers = args.servers().expect("two servers");
        assert_eq!(servers.len(), 2);
        let err = |flag: &str| {
            let args = McpArgs {
                servers: vec![flag.into()],
                config: None,
            };
            args.servers().err().map(|e| format!("{e:#}"))
        };
        assert!(err("no-equals").is_some_and(|e| e.contains("NAME=COMMAND")));
        assert!(err("x=").is_some_and(|e| e.contains("empty")));
        assert!(err("bad name=cmd").is_some_and(|e| e.contains("must be non-empty")));
        let twice = McpArgs {
            servers: vec!["a=cmd".into(), "a=other".into()],
            config: None,
        };
        assert!(twice.servers().is_err());

        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("mcp.json");
        std::fs::write(
            &file,
            r#"{"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer ${MULL_TEST_UNSET_TOKEN}"}}}}"#,
        )
        .expect("writes");
        let args = McpArgs {
            servers: Vec::new(),
            config: Some(file),
        };
        let e = args.servers().err().map(|e| format!("{e:#}"));
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("MULL_TEST_UNSET_TOKEN") && e.contains("\"web\"")),
            "{e:?}"
        );
    }

    #[test]
    fn variables_are_expanded() {
        std::env::set_var("MULL_TEST_MCP_TOKEN", "s3cret");
        assert_eq!(
            expand("Bearer ${MULL_TEST_MCP_TOKEN}!").unwrap(),
            "Bearer s3cret!"
        );
        assert_eq!(expand("plain").unwrap(), "plain");
        assert!(expand("${UNCLOSED").is_err());
    }
}
