//! A connection that outlives its server's restarts: each statement runs on the current
//! connection, and a connection found closed is replaced before the statement is sent.
//!
//! A database restart or failover closes every connection of a node. The reads, lease and
//! inbox connections are cheap to make again, and each of their statements stands alone, so
//! the next statement after a loss simply connects afresh: while the database is down it fails
//! at once with the connect error (its caller tries again on its own schedule — the renewal
//! period, the sweep, the client's next request), and once the database is back it works
//! again. The writer keeps its own connection and retries its in-doubt batch (see `log`).

use std::sync::{Arc, Mutex};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row, ToStatement};

use crate::error::{connect_driver, Target};

/// One connection, replaced when found closed; statements run in turn on whichever is current.
pub(crate) struct Conn {
    config: Config,
    target: Target,
    current: Mutex<Arc<Client>>,
    /// Serializes replacing the connection, so a loss is answered by one new connection.
    replacing: tokio::sync::Mutex<()>,
    /// Session settings every new connection starts with (e.g. a lock timeout).
    setup: Mutex<Vec<String>>,
}

impl Conn {
    /// Connects now: a node that cannot reach its database at start says so.
    pub async fn connect(config: &Config, target: &Target) -> Result<Conn, tokio_postgres::Error> {
        let client = connect_driver(config).await?;
        Ok(Conn {
            config: config.clone(),
            target: target.clone(),
            current: Mutex::new(Arc::new(client)),
            replacing: tokio::sync::Mutex::new(()),
            setup: Mutex::new(Vec::new()),
        })
    }

    fn current(&self) -> Arc<Client> {
        Arc::clone(&self.current.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The current connection, made anew when the last one was closed.
    pub async fn client(&self) -> Result<Arc<Client>, tokio_postgres::Error> {
        let client = self.current();
        if !client.is_closed() {
            return Ok(client);
        }
        let _one = self.replacing.lock().await;
        let client = self.current();
        if !client.is_closed() {
            // Another statement replaced it while this one waited.
            return Ok(client);
        }
        let fresh = connect_driver(&self.config).await?;
        let setup = self.setup.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for statement in &setup {
            fresh.batch_execute(statement).await?;
        }
        tracing::info!("{}: connected again", self.target);
        let fresh = Arc::new(fresh);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&fresh);
        Ok(fresh)
    }

    /// Runs `statement` now and on every connection made from here on.
    pub async fn set(&self, statement: &str) -> Result<(), tokio_postgres::Error> {
        self.setup
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(statement.to_owned());
        self.client().await?.batch_execute(statement).await
    }

    pub async fn query<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.client().await?.query(statement, params).await
    }

    pub async fn query_one<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        self.client().await?.query_one(statement, params).await
    }

    pub async fn query_opt<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        self.client().await?.query_opt(statement, params).await
    }

    pub async fn execute<T: ?Sized + ToStatement>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        self.client().await?.execute(statement, params).await
    }
}
