//! `mull serve`: the chat server (AI SDK UI message stream over SSE, and the WebSocket chat
//! transport) on a log, wired up from `mull-server`. All the protocol lives there.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use mull::store::Log;
use mull_server::{AgentSource, ConnectionLimits, ServerConfig, ServerState};

use super::agent::{choose_agent, SCRIPTED_DEMO};

/// Arguments of `mull serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The log every chat is written to.
    #[arg(long, default_value = "mull.db")]
    pub db: PathBuf,
    /// Where to listen. A non-loopback address needs MULL_TOKEN (every request must carry it).
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,
    /// The model: a spec such as `openai:gpt-4o-mini`, `anthropic:claude-sonnet-4-5` or
    /// `openai-compatible:http://127.0.0.1:8080/v1#model`, or `scripted-demo` to serve the
    /// demo's scripted travel desk offline (a fresh script per chat). Default: MULL_MODEL.
    #[arg(long)]
    pub model: Option<String>,
    /// Offer the model two harmless built-in tools: `time_now` (a clock) and `calculate`.
    #[arg(long)]
    pub tools: bool,
    /// How long a chat nobody uses stays in memory before it is dropped (it is re-opened from
    /// the log on its next request), e.g. `90s`, `10m`, `1h`.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub idle_ttl: Duration,
    /// The most connections open at once; one more is answered 503 and closed.
    #[arg(long, default_value_t = mull_server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// How long a request's headers may take to arrive (also how long an idle connection stays
    /// open between requests).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive once its headers have.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,
}

/// Serves until Ctrl-C, then finishes open requests and commits the log.
pub fn run(args: ServeArgs) -> Result<()> {
    // Resolve the agent first, so a missing key is reported before anything binds.
    let shared = choose_agent(args.model.as_deref(), args.tools)?;
    // And a token no request could match before the log is created.
    let config = ServerConfig {
        addr: args.addr,
        limits: ConnectionLimits {
            max_connections: args.max_connections,
            header_timeout: args.header_timeout,
        },
        ..ServerConfig::from_env()
    };
    config.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    let log = Log::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    let state = if args.model.as_deref() == Some(SCRIPTED_DEMO) {
        // A scripted model plays its script once: every chat gets its own copy.
        let per_chat: AgentSource = Arc::new(|_chat_id: &str| mull::demo::agent());
        ServerState::with_agents(log.clone(), per_chat)
    } else {
        ServerState::new(log.clone(), shared)
    }
    .with_session_options(Arc::new(|id: &str| crate::telemetry::session_options(id)))
    .with_idle_ttl(args.idle_ttl)
    .with_body_timeout(args.body_timeout);
    let result = runtime.block_on(async {
        let bound = mull_server::bind(&config, state).await?;
        // Scripts (and tests) read the bound address from this line; port 0 picks one.
        println!("listening on http://{}", bound.local_addr());
        bound
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
    });
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    Ok(result?)
}
