//! A connection that outlives its server's restarts: each statement runs on the current
//! connection, and a connection found closed is replaced before the statement is sent.
//!
//! A database restart or failover closes every connection of a node. The reads, lease and
//! inbox connections are cheap to make again, and each of their statements stands alone, so
//! the next statement after a loss simply connects afresh: while the database is down it fails
//! at once with the connect error (its caller tries again on its own schedule — the renewal
//! period, the sweep, the client's next request), and once the database is back it works
//! again. The writer keeps its own connection and retries its in-doubt batch (see `log`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row, RowStream, Statement};

use crate::error::{connect_driver, Target};

/// The most statements one connection keeps prepared; past it the cache starts afresh (the
/// statements of this crate are a few dozen fixed texts, so it is never reached in practice).
const MAX_PREPARED: usize = 256;

/// One connection and the statements prepared on it: a statement belongs to the connection
/// it was prepared on, so a connection made again starts with none.
struct Live {
    client: Arc<Client>,
    prepared: Mutex<HashMap<String, Statement>>,
}

impl Live {
    fn new(client: Client) -> Arc<Live> {
        Arc::new(Live {
            client: Arc::new(client),
            prepared: Mutex::new(HashMap::new()),
        })
    }
}

/// Round trips a connection (or a node's connections together) made: each awaited exchange
/// with the server counts one, statements sent together in one pipeline count once, and a
/// statement prepared (its text sent the first time) counts one more.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    pub(crate) round_trips: AtomicU64,
    pub(crate) prepares: AtomicU64,
}

impl Traffic {
    fn count(&self, round_trips: u64) {
        self.round_trips.fetch_add(round_trips, Ordering::Relaxed);
    }
}

/// One connection, replaced when found closed; statements run in turn on whichever is current,
/// each prepared once per connection (a text sent unprepared costs a round trip of its own
/// to be parsed before it runs).
pub(crate) struct Conn {
    config: Config,
    target: Target,
    current: Mutex<Arc<Live>>,
    /// Serializes replacing the connection, so a loss is answered by one new connection.
    replacing: tokio::sync::Mutex<()>,
    /// Session settings every new connection starts with (e.g. a lock timeout).
    setup: Mutex<Vec<String>>,
    traffic: Traffic,
}

impl Conn {
    /// Connects now: a node that cannot reach its database at start says so.
    pub async fn connect(config: &Config, target: &Target) -> Result<Conn, tokio_postgres::Error> {
        let client = connect_driver(config).await?;
        Ok(Conn {
            config: config.clone(),
            target: target.clone(),
            current: Mutex::new(Live::new(client)),
            replacing: tokio::sync::Mutex::new(()),
            setup: Mutex::new(Vec::new()),
            traffic: Traffic::default(),
        })
    }

    /// The round trips made on this connection so far.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    fn current(&self) -> Arc<Live> {
        Arc::clone(&self.current.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The current connection, made anew when the last one was closed.
    async fn live(&self) -> Result<Arc<Live>, tokio_postgres::Error> {
        let live = self.current();
        if !live.client.is_closed() {
            return Ok(live);
        }
        let _one = self.replacing.lock().await;
        let live = self.current();
        if !live.client.is_closed() {
            // Another statement replaced it while this one waited.
            return Ok(live);
        }
        let fresh = connect_driver(&self.config).await?;
        let setup = self.setup.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for statement in &setup {
            fresh.batch_execute(statement).await?;
        }
        tracing::info!("{}: connected again", self.target);
        let fresh = Live::new(fresh);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&fresh);
        Ok(fresh)
    }

    /// The current connection, made anew when the last one was closed.
    pub async fn client(&self) -> Result<Arc<Client>, tokio_postgres::Error> {
        Ok(Arc::clone(&self.live().await?.client))
    }

    /// `sql` prepared on `live` (once per connection).
    async fn prepared(&self, live: &Live, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(st) = live
            .prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sql)
        {
            return Ok(st.clone());
        }
        let st = live.client.prepare(sql).await?;
        self.traffic.count(1);
        self.traffic.prepares.fetch_add(1, Ordering::Relaxed);
        let mut prepared = live.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if prepared.len() >= MAX_PREPARED {
            prepared.clear();
        }
        prepared.insert(sql.to_owned(), st.clone());
        Ok(st)
    }

    /// The current connection and `sqls` prepared on it, for statements sent together
    /// ([`Conn::pipelined`]).
    pub async fn prepare_all(
        &self,
        sqls: &[&str],
    ) -> Result<(Arc<Client>, Vec<Statement>), tokio_postgres::Error> {
        let live = self.live().await?;
        let mut out = Vec::with_capacity(sqls.len());
        for sql in sqls {
            out.push(self.prepared(&live, sql).await?);
        }
        Ok((Arc::clone(&live.client), out))
    }

    /// Counts one round trip for statements sent together on one connection (the driver
    /// pipelines statements whose futures are polled together: each is sent before the first
    /// answer is awaited, and the server runs them in the order sent).
    pub fn pipelined(&self) {
        self.traffic.count(1);
    }

    /// Runs `statement` now and on every connection made from here on.
    pub async fn set(&self, statement: &str) -> Result<(), tokio_postgres::Error> {
        self.setup
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(statement.to_owned());
        self.traffic.count(1);
        self.client().await?.batch_execute(statement).await
    }

    /// The current connection and `sql` prepared on it, with the round trip about to be made
    /// on it counted.
    async fn one_trip(&self, sql: &str) -> Result<(Arc<Client>, Statement), tokio_postgres::Error> {
        let live = self.live().await?;
        let st = self.prepared(&live, sql).await?;
        self.traffic.count(1);
        Ok((Arc::clone(&live.client), st))
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let (client, st) = self.one_trip(sql).await?;
        client.query(&st, params).await
    }

    /// [`Conn::query`] with the rows handed out as they arrive, not gathered first: a read of
    /// many rows (every session's overview of a large log) holds one at a time.
    pub async fn query_stream(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<RowStream, tokio_postgres::Error> {
        let (client, st) = self.one_trip(sql).await?;
        client
            .query_raw(&st, params.iter().map(|p| *p as &dyn ToSql))
            .await
    }

    pub async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let (client, st) = self.one_trip(sql).await?;
        client.query_one(&st, params).await
    }

    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let (client, st) = self.one_trip(sql).await?;
        client.query_opt(&st, params).await
    }

    pub async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let (client, st) = self.one_trip(sql).await?;
        client.execute(&st, params).await
    }
}
