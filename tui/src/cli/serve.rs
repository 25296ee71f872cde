//! `mull serve`: the chat server (AI SDK UI message stream over SSE, and the WebSocket chat
//! transport) on a log, wired up from `mull-server`. All the protocol lives there.
//!
//! `--db` is a SQLite file (one node) or a `postgres://` URL: then any number of nodes serve
//! the same chats, each chat written by one node at a time (see `mull-store-pg`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use mull::store::{EventLog, Log};
use mull_server::{AgentSource, ConnectionLimits, ServerConfig, ServerState};
use mull_store_pg::{is_postgres_url, PgLog, PgOptions};

use super::agent::{choose_agent, SCRIPTED_DEMO};

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
    .with_session_options(Arc::new(|id: &str| crate::telemetry::session_options(id)))
    .with_idle_ttl(args.idle_ttl)
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
        let sweep = mull_server::inbox::spawn_inbox_sweep(state.clone(), inbox);
        let bound = mull_server::bind(&config, state).await?;
        // Scripts (and tests) read the bound address from this line; port 0 picks one.
        println!("listening on http://{}", bound.local_addr());
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
        let run = bound.run(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
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
        None => Log::open(&args.db)
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
