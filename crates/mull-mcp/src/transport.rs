//! How an MCP server is reached: a child process over stdio, or a streamable HTTP endpoint.

use std::path::PathBuf;

/// How a server is reached.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout. It is started at the first
    /// listing, started again when it has died, and killed when the server is closed or
    /// dropped.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl McpTransport {
    /// A child process started with `command`.
    pub fn stdio(command: impl Into<String>) -> McpTransport {
        McpTransport::Stdio {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// A streamable HTTP endpoint at `url` (e.g. `http://127.0.0.1:8000/mcp`).
    pub fn http(url: impl Into<String>) -> McpTransport {
        McpTransport::Http {
            url: url.into(),
            headers: Vec::new(),
        }
    }

    /// Adds an argument (stdio only; ignored for HTTP).
    pub fn arg(mut self, arg: impl Into<String>) -> McpTransport {
        if let McpTransport::Stdio { args, .. } = &mut self {
            args.push(arg.into());
        }
        self
    }

    /// Sets an environment variable of the child (stdio only).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> McpTransport {
        if let McpTransport::Stdio { env, .. } = &mut self {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets the child's working directory (stdio only).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> McpTransport {
        if let McpTransport::Stdio { cwd, .. } = &mut self {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a request header (HTTP only), e.g. an authorization header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> McpTransport {
        if let McpTransport::Http { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}
