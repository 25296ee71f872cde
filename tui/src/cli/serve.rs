//! `mull serve`: the chat server (AI SDK UI message stream over SSE, and the WebSocket chat
//! transport) on a log, wired up from `mull-server`. All the protocol lives there.
//!
//! `--db` is a SQLite file (one node) or a `postgres://` URL: then any number of nodes serve
//! the same chats, each chat written by one node at a time (see `mull-store-pg`).
//!
//! It stops cleanly on SIGTERM (how systemd, Docker and Kubernetes stop a service) and Ctrl-C:
//! no new connections or turns, running turns get `--grace` to finish and are then cancelled,
//! every client gets its turn's end, and the log is closed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use mull::store::{EventLog, Log};
use mull_server::{AgentSource, ConnectionLimits, ServerConfig, ServerState};
use mull_store_pg::{is_postgres_url, PgLog, PgOptions};

use super::agent::{choose_agent_streaming, SCRIPTED_DEMO};
use super::budget::{with_budget, BudgetArgs};
use super::mcp::{with_servers, McpArgs};

/// Arguments of `mull serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The log every chat is written to: a SQLite file, or a `postgres://` URL shared by
    /// several nodes.
    #[arg(long, default_value = "mull.db")]
    pub db: PathBuf,
    /// This node's name in the PostgreSQL lease rows (unique per running node). Default: the
    /// host name and process id.
    #[arg(long)]
    pub node: Option<String>,
    /// On PostgreSQL: how long a chat of a node that stopped stays locked before another node
    /// takes it over and recovers its turn (the lease's time to live; renewed every third).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,
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
    /// Whether the model's answers stream (`auto`, `on`, `off`), as for `mull chat`.
    #[arg(long, value_name = "auto|on|off")]
    pub stream: Option<mull::providers::openai::Streaming>,
    /// How long a chat nobody uses stays in memory before it is dropped (it is re-opened from
    /// the log on its next request), e.g. `90s`, `10m`, `1h`.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub idle_ttl: Duration,
    /// On a PostgreSQL log (several nodes): how long a chat nobody uses stays open on this node,
    /// its lease held, before it is given back for any node to take (`0s`: at once). Its next
    /// turn here meanwhile takes no lease and reads no history; a request for it on another
    /// node waits for the give-back. Worth it where a chat's requests go to one node.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub shared_idle_ttl: Duration,
    /// The most connections open at once; one more is answered 503 and closed.
    #[arg(long, default_value_t = mull_server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// The most connections one client address may hold (behind a proxy every connection
    /// comes from the proxy: raise it to --max-connections there).
    #[arg(long, default_value_t = mull_server::DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    pub max_connections_per_client: usize,
    /// The most turns one client address runs at once; one more is answered 429.
    #[arg(long, default_value_t = mull_server::DEFAULT_MAX_TURNS_PER_CLIENT)]
    pub max_turns_per_client: usize,
    /// The most request bytes one client address has in flight (bodies and WebSocket messages
    /// being decoded, and the requests of its running turns); one more request is answered 429.
    /// A client with nothing in flight may always send one request up to the body limit.
    #[arg(long, default_value_t = mull_server::DEFAULT_MAX_BYTES_PER_CLIENT)]
    pub max_bytes_per_client: usize,
    /// A browser origin whose pages may use the server, besides its own (repeatable), e.g.
    /// `--allow-origin http://localhost:5173`. Requests from other origins are refused (403).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// A host name the server answers besides its address (repeatable): the public name a
    /// proxy in front passes as `Host`. Other names are refused (403), which stops DNS rebinding.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// On SIGTERM or Ctrl-C: how long running turns get to finish before they are cancelled.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// How long a request's headers may take to arrive (also how long an idle connection stays
    /// open between requests).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive once its headers have.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,
    #[command(flatten)]
    pub mcp: McpArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

/// Serves until SIGTERM or Ctrl-C, then stops cleanly (see the module docs) and closes the log.
///
/// Long because it reads as the order an operator's server starts and stops in: the log, the
/// agent, the listener, the drain.
pub fn run(args: ServeArgs) -> Result<()> {
    // Resolve the agent first, so a missing key is reported before anything binds.
    let shared = choose_agent_streaming(args.model.as_deref(), args.stream, args.tools)?;
    // Every chat lists the same servers' tools (their connections are shared).
    let servers = args.mcp.servers()?;
    // Every chat is held to the same budget, each to its own spend.
    let budget = args.budget.budget()?;
    // And a token no request could match before the log is created.
    let config = ServerConfig {
        addr: args.addr,
        limits: ConnectionLimits {
            max_connections: args.max_connections,
            max_per_client: args.max_connections_per_client,
            header_timeout: args.header_timeout,
        },
        allowed_hosts: args.allow_hosts.clone(),
        allowed_origins: args.allow_origins.clone(),
        grace: args.grace,
        max_turns_per_client: args.max_turns_per_client,
        max_bytes_per_client: args.max_bytes_per_client,
        ..ServerConfig::from_env()
    };
    config.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    let backend = open_backend(&runtime, &args)?;
    let log: Arc<dyn EventLog> = match &backend {
        Backend::Sqlite(log) => Arc::new(log.clone()),
        Backend::Postgres(log) => Arc::new(log.clone()),
    };
    let state = if args.model.as_deref() == Some(SCRIPTED_DEMO) {
        // A scripted model plays its script once: every chat gets its own copy.
        let per_chat: AgentSource = Arc::new(|_chat_id: &str| mull::demo::agent());
        ServerState::on(log, per_chat)
    } else {
        ServerState::on(log, Arc::new(move |_: &str| Arc::clone(&shared)))
    }
    .with_session_options(Arc::new(move |id: &str| {
        with_budget(
            with_servers(crate::telemetry::session_options(id), &servers),
            budget.as_ref(),
        )
    }))
    .with_idle_ttl(args.idle_ttl)
    .with_shared_idle_ttl(args.shared_idle_ttl)
    .with_body_timeout(args.body_timeout);
    // The server takes what the dashboard and `mull approve` post to the log's inbox.
    let inbox: Box<dyn mull_store::InboxStore> = match &backend {
        Backend::Sqlite(log) => Box::new(
            mull_store::Inbox::open(log.path())
                .with_context(|| format!("opening the inbox of {}", args.db.display()))?,
        ),
        Backend::Postgres(_) => Box::new(
            runtime
                .block_on(mull_store_pg::PgInbox::open(&args.db.to_string_lossy()))
                .context("opening the PostgreSQL log's inbox")?,
        ),
    };
    let result = runtime.block_on(async {
        // Listen for the stop signals before the address is announced: a SIGTERM sent right
        // after it must stop the server cleanly, not kill it.
        let stop_signal = stop_signal()?;
        let sweep = mull_server::inbox::spawn_inbox_sweep(state.clone(), inbox);
        let bound = mull_server::bind(&config, state).await?;
        // Scripts (and tests) read the bound address from this line; port 0 picks one.
        println!("listening on http://{}", bound.local_addr());
        startup_line(&args, &backend, &config, bound.local_addr());
        let lost = match &backend {
            Backend::Postgres(log) => Some(log.clone()),
            Backend::Sqlite(_) => None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let watch = tokio::spawn(async move {
            let Some(log) = lost else {
                return std::future::pending().await;
            };
            let error = log.stopped().await;
            let _ = stop.send(());
            error
        });
        let (gone, mut writer_gone) = tokio::sync::watch::channel(false);
        let grace = config.grace;
        let run = bound.run(async move {
            tokio::select! {
                name = stop_signal => say(&format!(
                    "{name}: stopping; running turns get {} to finish",
                    humantime::format_duration(grace)
                )),
                _ = stopped => { let _ = gone.send(true); }
            }
        });
        // A node whose writer stopped waits only briefly for its open streams: nothing they
        // would carry can be written any more.
        let served = tokio::select! {
            served = run => served,
            _ = async {
                let _ = writer_gone.wait_for(|gone| *gone).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            } => Ok(()),
        };
        sweep.abort();
        let failed = if watch.is_finished() {
            watch.await.ok()
        } else {
            watch.abort();
            None
        };
        anyhow::Ok((served, failed))
    });
    match backend {
        Backend::Sqlite(log) => log
            .close()
            .with_context(|| format!("committing {}", args.db.display()))?,
        Backend::Postgres(log) => {
            if let Err(e) = runtime.block_on(log.flush_all()) {
                eprintln!("committing the last events: {e}");
            }
        }
    }
    let (served, failed) = result?;
    served?;
    match failed {
        Some(error) => Err(anyhow::anyhow!(
            "the log's writer stopped, so this node stopped serving: {error}"
        )),
        None => Ok(()),
    }
}

/// A line for the operator: a `tracing` event when logs are on, else on standard error.
fn say(line: &str) {
    if crate::telemetry::installed().logs {
        tracing::info!("{line}");
    } else {
        eprintln!("mull serve: {line}");
    }
}

/// Listens for SIGTERM and Ctrl-C (SIGINT) from now on; the future resolves with the name of
/// the first one.
fn stop_signal() -> Result<impl std::future::Future<Output = &'static str>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// One line on standard error saying what this server is: where it listens, its log, its
/// model, whether spans are exported and whether requests need the token.
fn startup_line(args: &ServeArgs, backend: &Backend, config: &ServerConfig, addr: SocketAddr) {
    let database = match backend {
        Backend::Sqlite(log) => format!("{} (SQLite)", log.path().display()),
        Backend::Postgres(log) => format!("{} (PostgreSQL, node {})", log.database(), log.node()),
    };
    let model = args
        .model
        .clone()
        .or_else(|| std::env::var("MULL_MODEL").ok())
        .unwrap_or_else(|| "?".to_owned());
    let installed = crate::telemetry::installed();
    let otlp = match &installed.otlp {
        Some(endpoint) => format!("on ({endpoint})"),
        None => "off".to_owned(),
    };
    let token = if config.token.is_some() {
        "required"
    } else {
        "not required"
    };
    if installed.logs {
        tracing::info!(
            %addr,
            database = %database,
            model = %model,
            otlp = %otlp,
            token,
            "mull serve started"
        );
    } else {
        eprintln!(
            "mull serve: listening on http://{addr}; log {database}; model {model}; \
             OTLP export {otlp}; token {token}"
        );
    }
}

/// The log `--db` names, opened for writing.
enum Backend {
    Sqlite(Log),
    Postgres(PgLog),
}

fn open_backend(runtime: &tokio::runtime::Runtime, args: &ServeArgs) -> Result<Backend> {
    match args.db.to_str().filter(|db| is_postgres_url(db)) {
        Some(url) => {
            let node = args.node.clone().unwrap_or_else(default_node);
            let mut options = PgOptions::new(node);
            options.lease_ttl = args.lease_ttl;
            let log = runtime
                .block_on(PgLog::connect(url, options))
                .context("opening the PostgreSQL log")?;
            Ok(Backend::Postgres(log))
        }
        None => super::open_log(&args.db)
            .with_context(|| format!("opening {}", args.db.display()))
            .map(Backend::Sqlite),
    }
}

/// `host-pid`: unique among nodes running at once.
fn default_node() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "node".to_owned());
    format!("{host}-{}", std::process::id())
}
