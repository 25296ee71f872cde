//! The database file: how it is recognised, configured and migrated.
//!
//! A mull log is a SQLite database whose `application_id` is [`APPLICATION_ID`] and whose
//! `user_version` is the schema version. Migrations add tables and indexes, or drop an index no
//! reader needs; rows are never rewritten in place. A file that is not SQLite, a SQLite file of another program, or a
//! schema newer than this build are refused with an error naming the file — before anything is
//! changed in it.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::StoreError;

/// `PRAGMA application_id` of every mull log: the bytes `MULL`.
pub const APPLICATION_ID: i64 = 0x4D55_4C4C;

/// How long a connection waits for a lock held by another connection before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The kinds left out of the lifecycle index: the bulk of the log, one row per stream part.
/// Queries that want the index repeat this exact predicate so the planner can use it.
pub const LIFECYCLE_PREDICATE: &str = "kind <> 'chunk'";

/// The `kind` column of a chunk written outside its session's turns. Session reads look for
/// chunks inside turns only; this kind puts such a chunk in the lifecycle index instead, where
/// they find it. The engine never writes one; a hand-made or imported log may.
pub const LOOSE_CHUNK: &str = "loose_chunk";

/// Schema migrations in order; migration `i` moves `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the event table and its indexes.
    "CREATE TABLE events (
         seq        INTEGER PRIMARY KEY,
         session_id TEXT    NOT NULL,
         turn_id    TEXT,
         at         TEXT    NOT NULL,
         v          INTEGER NOT NULL,
         kind       TEXT    NOT NULL,
         payload    TEXT    NOT NULL
     );
     CREATE INDEX events_by_session ON events (session_id, seq);
     CREATE INDEX events_by_turn ON events (turn_id, seq) WHERE turn_id IS NOT NULL;
     CREATE INDEX events_lifecycle ON events (session_id, seq) WHERE kind <> 'chunk';",
    // 2: a turn's events are read through its session (a turn is a stretch of one session's
    // seqs), so a per-turn index is one more B-tree to write for every chunk with no reader.
    "DROP INDEX IF EXISTS events_by_turn;",
    // 3: an index over every row of a session cost each streamed chunk a second B-tree insert
    // and its commit a page more, and a fifth of a short turn's time. A session's lifecycle
    // events are indexed (`events_lifecycle`); its chunks, which only its running turns write,
    // are read by walking each turn's stretch of the table (see `LogReader::session_page`).
    "DROP INDEX IF EXISTS events_by_session;",
    // 4: the log's last seq each time a writer opened it. A turn's chunks all come from the
    // writer that started the turn, so the stretch of a turn left open by a stopped process
    // ends at the next start, however late its recovery finishes it.
    "CREATE TABLE writer_starts (seq INTEGER PRIMARY KEY);",
    // 5: `at` as microseconds since the Unix epoch (UTC) instead of fixed-width RFC 3339 text:
    // 8 bytes a row instead of 27, and no formatting or parsing per row. A text value that is
    // not in the fixed form is kept as it was, for readers to report. The table is copied once,
    // in one transaction: a large log's first open by this build takes a while and, for that
    // time, about twice its size on disk.
    "CREATE TABLE events_v5 (
         seq        INTEGER PRIMARY KEY,
         session_id TEXT    NOT NULL,
         turn_id    TEXT,
         at         INTEGER NOT NULL,
         v          INTEGER NOT NULL,
         kind       TEXT    NOT NULL,
         payload    TEXT    NOT NULL
     );
     INSERT INTO events_v5 (seq, session_id, turn_id, at, v, kind, payload)
         SELECT seq, session_id, turn_id,
                CASE WHEN typeof(at) = 'text' AND length(at) = 27 AND at GLOB
                          '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'
                     THEN coalesce(CAST(strftime('%s', substr(at, 1, 19)) AS INTEGER) * 1000000
                                   + CAST(substr(at, 21, 6) AS INTEGER), at)
                     ELSE at END,
                v, kind, payload
         FROM events ORDER BY seq;
     DROP TABLE events;
     ALTER TABLE events_v5 RENAME TO events;
     CREATE INDEX events_lifecycle ON events (session_id, seq) WHERE kind <> 'chunk';",
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What the header of an existing file says.
struct Identity {
    application_id: i64,
    user_version: i64,
    tables: i64,
}

fn identify(conn: &Connection, path: &Path) -> Result<Identity, StoreError> {
    let read = |sql: &str| -> Result<i64, StoreError> {
        conn.query_row(sql, [], |row| row.get(0)).map_err(|source| {
            match source.sqlite_error_code() {
                Some(rusqlite::ErrorCode::NotADatabase) if looks_like_jsonl(path) => {
                    StoreError::JsonlNotDatabase {
                        path: path.to_owned(),
                    }
                }
                Some(rusqlite::ErrorCode::NotADatabase) => StoreError::NotADatabase {
                    path: path.to_owned(),
                },
                Some(rusqlite::ErrorCode::DatabaseCorrupt) => StoreError::Damaged {
                    path: path.to_owned(),
                    what: format!(
                        "its first pages, which say what is in it, cannot be read ({source}); \
                         no event can be found without them: restore the file from a copy"
                    ),
                },
                _ => StoreError::Sqlite {
                    context: format!("{}: reading the header", path.display()),
                    source,
                },
            }
        })
    };
    Ok(Identity {
        application_id: read("PRAGMA application_id")?,
        user_version: read("PRAGMA user_version")?,
        tables: read("SELECT count(*) FROM sqlite_master")?,
    })
}

/// Whether a file that is not SQLite starts like a JSONL export (a JSON object).
fn looks_like_jsonl(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut head));
    read.is_ok_and(|n| head[..n].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
}

/// Refuses a directory before SQLite tries to open it (it would say only "disk I/O error").
fn refuse_directory(path: &Path) -> Result<(), StoreError> {
    if path.is_dir() {
        return Err(StoreError::IsADirectory {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Refuses files that are not mull logs, and schemas newer than this build.
fn check_identity(id: &Identity, path: &Path) -> Result<(), StoreError> {
    let fresh = id.application_id == 0 && id.user_version == 0 && id.tables == 0;
    if !fresh && id.application_id != APPLICATION_ID {
        return Err(StoreError::NotAMullLog {
            path: path.to_owned(),
            application_id: id.application_id,
            tables: id.tables,
        });
    }
    if id.user_version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found: id.user_version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Opens (creating if needed) the writer's connection: checks the file is a mull log and is not
/// damaged (see [`crate::integrity`]), sets WAL and `synchronous=NORMAL`, and runs pending
/// migrations.
pub fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    open_writer_with(path, crate::durability::Durability::Process)
}

/// [`open_writer`] with commits as durable as `durability` asks: `synchronous=NORMAL` (a
/// commit survives a killed process) or `FULL` (it survives a power cut: an fsync per commit).
pub fn open_writer_with(
    path: &Path,
    durability: crate::durability::Durability,
) -> Result<Connection, StoreError> {
    refuse_directory(path)?;
    let ctx = |what: &str| format!("{}: {what}", path.display());
    let mut conn = Connection::open(path).map_err(StoreError::sqlite(ctx("opening")))?;
    // busy_timeout first: every later pragma may need a lock.
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(StoreError::sqlite(ctx("setting busy_timeout")))?;
    let id = identify(&conn, path)?;
    check_identity(&id, path)?;
    if id.tables > 0 {
        // Before anything is appended or migrated: a damaged log is refused as it is.
        crate::open_check::check_at_open(&mut conn, path)?;
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(StoreError::sqlite(ctx("enabling WAL")))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Sqlite {
            context: ctx(&format!("enabling WAL (journal_mode stayed {mode})")),
            source: rusqlite::Error::InvalidQuery,
        });
    }
    let synchronous = match durability {
        crate::durability::Durability::Power => "FULL",
        _ => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(StoreError::sqlite(ctx("setting synchronous")))?;
    // One cached INSERT per form and batch size (3 forms × up to 16 rows: 48) besides the
    // other statements, so that a writer switching forms never re-prepares one.
    conn.set_prepared_statement_cache_capacity(96);
    migrate(&mut conn, id.user_version, path)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, from: i64, path: &Path) -> Result<(), StoreError> {
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(from.max(0) as usize) {
        let to = index as i64 + 1;
        let ctx = format!("{}: migrating the schema to version {to}", path.display());
        let tx = conn
            .transaction()
            .map_err(StoreError::sqlite(ctx.clone()))?;
        tx.execute_batch(sql)
            .map_err(StoreError::sqlite(ctx.clone()))?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(StoreError::sqlite(ctx.clone()))?;
        tx.pragma_update(None, "user_version", to)
            .map_err(StoreError::sqlite(ctx.clone()))?;
        tx.commit().map_err(StoreError::sqlite(ctx))?;
    }
    Ok(())
}

/// Opens the connection the writer thread checkpoints with while the write connection commits
/// (a checkpoint needs a read-write connection, but this one never writes rows).
pub fn open_checkpointer(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(StoreError::sqlite(format!(
        "{}: opening the checkpoint connection",
        path.display()
    )))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(StoreError::sqlite(format!(
            "{}: setting busy_timeout",
            path.display()
        )))?;
    Ok(conn)
}

/// Opens a read-only connection to an existing log, from any process, while a writer runs.
pub fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    if !path.exists() {
        return Err(StoreError::Missing {
            path: path.to_owned(),
        });
    }
    refuse_directory(path)?;
    let ctx = |what: &str| format!("{}: {what}", path.display());
    // Opened for writing where the file allows it (never created), then made query-only: so
    // the last connection to close, reader or writer, folds the WAL back and removes the
    // `-wal` and `-shm` files, as SQLite does for a writer. A read-only connection cannot, and
    // `mull stats` on a closed log used to leave both behind. A write-protected file opens
    // read-only, as before.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn =
        Connection::open_with_flags(path, flags).map_err(StoreError::sqlite(ctx("opening")))?;
    conn.pragma_update(None, "query_only", true)
        .map_err(StoreError::sqlite(ctx("making the connection query-only")))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(StoreError::sqlite(ctx("setting busy_timeout")))?;
    let id = identify(&conn, path)?;
    if id.application_id != APPLICATION_ID {
        return Err(StoreError::NotAMullLog {
            path: path.to_owned(),
            application_id: id.application_id,
            tables: id.tables,
        });
    }
    check_identity(&id, path)?;
    if id.user_version < SCHEMA_VERSION {
        return Err(StoreError::OlderSchema {
            path: path.to_owned(),
            found: id.user_version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(conn)
}

/// SQLite's query plan for `sql` (one `?1` parameter), a line per step: what tests check to
/// make sure a query walks the index it was written for.
#[cfg(test)]
pub(crate) fn query_plan(conn: &Connection, sql: &str) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("prepares")
        .query_map(["s"], |r| r.get::<_, String>(3))
        .expect("runs")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_file_is_migrated_and_recognised() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let conn = open_writer(&path).expect("creates");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("reads");
        assert_eq!(version, SCHEMA_VERSION);
        drop(conn);
        open_writer(&path).expect("reopens");
        open_reader(&path).expect("reads");
    }

    #[test]
    fn a_log_of_an_older_schema_is_migrated_in_place_keeping_its_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        // A log as a build of schema 2 left it: one event, and the index over every row.
        let raw = Connection::open(&path).expect("raw");
        for sql in &MIGRATIONS[..2] {
            raw.execute_batch(sql).expect("old schema");
        }
        raw.pragma_update(None, "application_id", APPLICATION_ID)
            .expect("id");
        raw.pragma_update(None, "user_version", 2).expect("version");
        raw.execute(
            "INSERT INTO events VALUES (1, 's', NULL, '2025-01-01T00:00:00.000000Z', 1, 'session_opened', '{}')",
            [],
        )
        .expect("row");
        drop(raw);
        let err = open_reader(&path).expect_err("a reader does not migrate");
        assert!(
            matches!(err, StoreError::OlderSchema { found: 2, .. }),
            "{err}"
        );

        let conn = open_writer(&path).expect("migrates");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("reads");
        assert_eq!(version, SCHEMA_VERSION);
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY name")
            .expect("prepares")
            .query_map([], |r| r.get(0))
            .expect("runs")
            .collect::<Result<_, _>>()
            .expect("names");
        assert_eq!(indexes, ["events_lifecycle"]);
        let starts: i64 = conn
            .query_row("SELECT count(*) FROM writer_starts", [], |r| r.get(0))
            .expect("the writers' starts are kept");
        assert_eq!(starts, 0, "opening a connection is not a writer's start");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .expect("counts");
        assert_eq!(rows, 1);
        // The text timestamp became microseconds since the epoch.
        let at: i64 = conn
            .query_row("SELECT at FROM events WHERE seq = 1", [], |r| r.get(0))
            .expect("an integer");
        assert_eq!(at, 1_735_689_600_000_000);
    }

    #[test]
    fn lifecycle_queries_use_the_partial_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = open_writer(&dir.path().join("log.db")).expect("creates");
        let plan = query_plan(
            &conn,
            &format!(
                "SELECT seq FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} ORDER BY seq"
            ),
        );
        assert!(
            plan.iter().any(|p| p.contains("events_lifecycle")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        drop(open_writer(&path).expect("creates"));
        let raw = Connection::open(&path).expect("raw");
        raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("bumps");
        drop(raw);
        let err = open_writer(&path).expect_err("newer schema");
        assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
        let err = open_reader(&path).expect_err("newer schema");
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn other_sqlite_files_and_non_sqlite_files_are_refused_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let other = dir.path().join("other.db");
        let raw = Connection::open(&other).expect("raw");
        raw.execute_batch("CREATE TABLE notes(x)").expect("creates");
        drop(raw);
        let err = open_writer(&other).expect_err("not mull");
        assert!(matches!(err, StoreError::NotAMullLog { .. }), "{err}");
        let mode: String = Connection::open(&other)
            .expect("raw")
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("reads");
        assert_eq!(mode, "delete", "a refused file must not be switched to WAL");

        let text = dir.path().join("notes.txt");
        std::fs::write(
            &text,
            "hello, this is not a database at all, just some text\n".repeat(20),
        )
        .expect("writes");
        let err = open_writer(&text).expect_err("not sqlite");
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
        assert!(err.to_string().contains("notes.txt"), "{err}");
        let err = open_reader(&text).expect_err("not sqlite");
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    }
}
