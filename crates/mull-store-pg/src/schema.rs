//! The database: how a mull database is recognised and migrated.
//!
//! A mull database has a table `mull_meta` holding `application = mull` and the schema version.
//! Migrations run in one transaction under an advisory lock, so nodes starting together migrate
//! once. A database with other programs' tables and no `mull_meta`, and a schema newer than this
//! build, are refused with an error naming the database, before anything is changed in it.

use mull_store::StoreError;
use tokio_postgres::{Client, GenericClient};

use crate::error::{server_error, Target};

/// The advisory lock key migrations hold: the bytes `MULL`.
const MIGRATION_LOCK: i64 = 0x4D55_4C4C;

/// Schema migrations in order; migration `i` moves the version from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: events keyed by session and seq — the key is the optimistic-concurrency check, an
    // append at a seq the session has fails with unique_violation — each stamped with the
    // lease epoch it was written under; one lease row per session (owner, epoch, expiry).
    // `at` is microseconds since the Unix epoch and `payload` exactly `Event::encode`, as in
    // the SQLite log.
    "CREATE TABLE mull_events (
         session_id text     NOT NULL,
         seq        bigint   NOT NULL,
         turn_id    text,
         at         bigint   NOT NULL,
         v          smallint NOT NULL,
         kind       text     NOT NULL,
         payload    text     NOT NULL,
         epoch      bigint   NOT NULL,
         PRIMARY KEY (session_id, seq)
     );
     CREATE TABLE mull_leases (
         session_id text        PRIMARY KEY,
         owner      text        NOT NULL,
         epoch      bigint      NOT NULL,
         expires_at timestamptz NOT NULL
     );",
    // 2: a lease given back is marked, so a lease that expired without being given back (its
    // node died or was cut off mid-work) can be told apart: its session may hold a turn to
    // recover, and any node sweeping for such leases takes it over.
    "ALTER TABLE mull_leases ADD COLUMN released boolean NOT NULL DEFAULT false;
     CREATE INDEX mull_leases_unreleased ON mull_leases (expires_at) WHERE NOT released;",
    // 3: a cancellation asked on a node that does not hold the session: a row the holder
    // takes (deletes) when it next looks, and acts on. One row per session at most.
    "CREATE TABLE mull_cancels (
         session_id   text        PRIMARY KEY,
         requested_by text        NOT NULL,
         requested_at timestamptz NOT NULL DEFAULT now()
     );",
    // 4: the log's inbox (see `inbox`): messages for a session from a process that does not
    // hold it, claimed by one taker (`taken`), with what came of them. Times in microseconds.
    "CREATE TABLE mull_inbox (
         id         bigserial PRIMARY KEY,
         session_id text      NOT NULL,
         kind       text      NOT NULL,
         body       text      NOT NULL,
         at         bigint    NOT NULL,
         taken      bigint,
         outcome    text
     );
     CREATE INDEX mull_inbox_waiting ON mull_inbox (session_id, id) WHERE taken IS NULL;",
    // 5: one row per session, kept current by the statement that commits each batch: its
    // first and last seq and time, and the transaction that last changed it (`changed`), so a
    // session list reads the newest sessions from an index and a follower reads only what
    // changed since it last looked (see `read`). Lifecycle events (every kind but `chunk`)
    // are indexed by session, as in the SQLite log, so turns and overviews never read chunks.
    "CREATE TABLE mull_sessions (
         session_id text   PRIMARY KEY,
         first_seq  bigint NOT NULL,
         last_seq   bigint NOT NULL,
         first_at   bigint NOT NULL,
         last_at    bigint NOT NULL,
         changed    xid8   NOT NULL
     );
     INSERT INTO mull_sessions
         SELECT session_id, min(seq), max(seq), min(at), max(at), pg_current_xact_id()
         FROM mull_events GROUP BY session_id;
     CREATE INDEX mull_sessions_newest ON mull_sessions (last_at, session_id);
     CREATE INDEX mull_sessions_changed ON mull_sessions (changed);
     CREATE INDEX mull_events_lifecycle ON mull_events (session_id, seq) WHERE kind <> 'chunk';",
];

/// Brings the rows of `mull_sessions` up to date with events just written: `rows` names a
/// CTE (or table) of their `(session_id, seq, at)`. Part of the statement that writes them.
pub(crate) fn touch_sessions(rows: &str) -> String {
    format!(
        "INSERT INTO mull_sessions AS s (session_id, first_seq, last_seq, first_at, last_at, changed)
         SELECT session_id, min(seq), max(seq), min(at), max(at), pg_current_xact_id()
         FROM {rows} GROUP BY session_id ORDER BY session_id
         ON CONFLICT (session_id) DO UPDATE
             SET last_seq = greatest(s.last_seq, EXCLUDED.last_seq),
                 last_at = greatest(s.last_at, EXCLUDED.last_at),
                 changed = EXCLUDED.changed"
    )
}

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What the database says about itself.
struct Identity {
    /// `None`: no `mull_meta` table.
    version: Option<i64>,
    application: Option<String>,
    tables: i64,
}

async fn identify(client: &impl GenericClient, target: &Target) -> Result<Identity, StoreError> {
    let ctx = || format!("{target}: reading the schema");
    let row = client
        .query_one(
            "SELECT count(*), bool_or(table_name = 'mull_meta')
             FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .map_err(server_error(ctx()))?;
    let tables: i64 = row.get(0);
    let has_meta: Option<bool> = row.get(1);
    if has_meta != Some(true) {
        return Ok(Identity {
            version: None,
            application: None,
            tables,
        });
    }
    let rows = client
        .query("SELECT key, value FROM mull_meta", &[])
        .await
        .map_err(server_error(ctx()))?;
    let mut id = Identity {
        version: None,
        application: None,
        tables,
    };
    for row in rows {
        let key: &str = row.get(0);
        let value: String = row.get(1);
        match key {
            "application" => id.application = Some(value),
            "schema_version" => id.version = value.parse().ok(),
            _ => {}
        }
    }
    Ok(id)
}

/// Refuses databases that are not mull's, and schemas newer than this build.
fn check(id: &Identity, target: &Target) -> Result<(), StoreError> {
    let foreign = match (&id.application, id.version) {
        (None, None) => id.tables > 0,
        (Some(app), Some(_)) => app != "mull",
        _ => true,
    };
    if foreign {
        return Err(StoreError::ForeignDatabase {
            database: target.to_string(),
            tables: id.tables,
        });
    }
    match id.version {
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::NewerSchema {
            path: target.to_string().into(),
            found,
            supported: SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// Checks the database and runs pending migrations (a writer's open).
pub(crate) async fn migrate(client: &mut Client, target: &Target) -> Result<(), StoreError> {
    let id = identify(client, target).await?;
    check(&id, target)?;
    if id.version == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    let ctx = |what: &str| format!("{target}: {what}");
    let tx = client
        .transaction()
        .await
        .map_err(server_error(ctx("starting the migration")))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(server_error(ctx("locking for the migration")))?;
    // Another node may have migrated while we waited for the lock.
    let id = identify(&tx, target).await?;
    check(&id, target)?;
    let mut version = match id.version {
        Some(v) => v,
        None => {
            tx.batch_execute(
                "CREATE TABLE mull_meta (key text PRIMARY KEY, value text NOT NULL);
                 INSERT INTO mull_meta VALUES ('application', 'mull'), ('schema_version', '0');",
            )
            .await
            .map_err(server_error(ctx("creating mull_meta")))?;
            0
        }
    };
    while version < SCHEMA_VERSION {
        let sql = MIGRATIONS[version as usize];
        tx.batch_execute(sql)
            .await
            .map_err(server_error(ctx(&format!("migration {}", version + 1))))?;
        version += 1;
    }
    tx.execute(
        "UPDATE mull_meta SET value = $1 WHERE key = 'schema_version'",
        &[&version.to_string()],
    )
    .await
    .map_err(server_error(ctx("recording the schema version")))?;
    tx.commit()
        .await
        .map_err(server_error(ctx("committing the migration")))
}

/// Checks the database is a mull database this build reads (a reader's open: changes nothing).
pub(crate) async fn check_readable(client: &Client, target: &Target) -> Result<(), StoreError> {
    let id = identify(client, target).await?;
    check(&id, target)?;
    match id.version {
        None => Err(StoreError::Missing {
            path: target.to_string().into(),
        }),
        Some(found) if found < SCHEMA_VERSION => Err(StoreError::OlderSchema {
            path: target.to_string().into(),
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}
