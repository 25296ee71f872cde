//! Naming the database in errors, and turning the driver's errors into the log's.

use std::fmt;
use std::time::Duration;

use mull_store::StoreError;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

/// How long connecting may take when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A database as errors name it: `postgres://host:port/name`, never with a password.
#[derive(Debug, Clone)]
pub struct Target(String);

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// Parses `url`, giving it a connect timeout if it has none.
pub(crate) fn parse(url: &str) -> Result<(Config, Target), StoreError> {
    let mut config: Config =
        url.parse()
            .map_err(|e: tokio_postgres::Error| StoreError::Server {
                context: format!("{}: not a PostgreSQL URL", redact(url)),
                message: e.to_string(),
            })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let name = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    let target = Target(format!("postgres://{host}:{port}/{name}"));
    Ok((config, target))
}

/// The URL with any password taken out.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let auth = &url[s + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Connects and spawns the connection's driver on the current runtime.
pub(crate) async fn connect(config: &Config, target: &Target) -> Result<Client, StoreError> {
    connect_driver(config)
        .await
        .map_err(server_error(format!("{target}: cannot connect")))
}

/// [`connect`], with the driver's own error (for a caller that retries on it).
pub(crate) async fn connect_driver(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!("PostgreSQL connection ended: {e}");
        }
    });
    Ok(client)
}

/// Whether the error is the connection's, not the statement's: the connection closed or broke,
/// or the server is shutting down, restarting or not accepting connections yet (SQLSTATE
/// classes 08 and 57P). Such a statement may be tried again on a new connection.
pub(crate) fn is_connection_loss(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || code.starts_with("57P")
        }
    }
}

/// The driver's error in words: the server's message and detail where it sent one, else the
/// driver's own text with its cause (a closed connection, an I/O error).
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(": ");
            text.push_str(detail);
        }
        return text;
    }
    let mut text = e.to_string();
    if e.is_closed() {
        text = "the connection to the server was lost".to_owned();
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Wraps a driver error with what was being done, on which database.
pub(crate) fn server_error(context: String) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::Server {
        message: describe(&e),
        context,
    }
}

/// Whether the error is the primary key refusing a seq the session already has.
pub(crate) fn is_conflict(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// The session and seq a unique violation names in its detail
/// (`Key (session_id, seq)=(s1, 5) already exists.`).
pub(crate) fn conflict_key(e: &tokio_postgres::Error) -> Option<(String, u64)> {
    let detail = e.as_db_error()?.detail()?;
    let inner = detail.split_once(")=(")?.1;
    let inner = inner.rsplit_once(") already exists")?.0;
    let (session, seq) = inner.rsplit_once(", ")?;
    Some((session.to_owned(), seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_named_without_their_password() {
        let (_, target) = parse("postgres://me:secret@db.local:5433/mull").expect("parses");
        assert_eq!(target.to_string(), "postgres://db.local:5433/mull");
        assert_eq!(
            redact("postgres://me:secret@h/db"),
            "postgres://me:***@h/db"
        );
        assert!(is_postgres_url("postgresql://h/db"));
        assert!(!is_postgres_url("/tmp/log.db"));
    }
}
