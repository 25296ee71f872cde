//! Copying a SQLite log into PostgreSQL ([`import`], what `mull import FILE postgres://…` does
//! after checking the file into a scratch SQLite log). Readers never copy: both backends are
//! read where they are, through the read contract (`mull_store::ReadLog`).
//!
//! The event encoding is the same on both sides; only the numbering differs. SQLite numbers
//! events across the file, PostgreSQL per session (from 1, contiguous). An import renumbers,
//! keeping every session's order, and translates the one event that names a seq — a fork's
//! `session_forked {origin, origin_seq}` — into the numbering of the database. So a fork's
//! origin is imported before the fork (a fork is made after its origin's events, so the log's
//! own order does this; a fork whose origin is missing is an error naming it).

use std::collections::HashMap;

use mull_core::{Envelope, Event, EVENT_VERSION};
use mull_store::{timestamp, LogReader, StoreError};

use crate::error::{connect, parse, server_error};
use crate::schema;

/// Events read (and inserted) per statement.
const PAGE: usize = 4096;

/// The insert of an import: rows without a lease (epoch 0); the first node that opens an
/// imported session takes its lease at epoch 1.
const IMPORT: &str =
    "INSERT INTO mull_events (session_id, seq, turn_id, at, v, kind, payload, epoch)
     SELECT u.session_id, u.seq, u.turn_id, u.at, u.v, u.kind, u.payload, 0
     FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int2[], $6::text[], $7::text[])
          AS u(session_id, seq, turn_id, at, v, kind, payload)";

/// Columns of rows waiting to be inserted.
#[derive(Default)]
struct Batch {
    session_ids: Vec<String>,
    seqs: Vec<i64>,
    turn_ids: Vec<Option<String>>,
    ats: Vec<i64>,
    vs: Vec<i16>,
    kinds: Vec<String>,
    payloads: Vec<String>,
}

impl Batch {
    fn push(&mut self, env: &Envelope, seq: u64) {
        // A known event is stored in this build's encoding; an unknown one verbatim.
        let v = match env.event {
            Event::Unknown(_) => env.v,
            _ => EVENT_VERSION,
        };
        self.session_ids.push(env.session_id.clone());
        self.seqs.push(seq as i64);
        self.turn_ids.push(env.turn_id.clone());
        self.ats.push(timestamp::to_stored(env.at));
        self.vs.push(v as i16);
        self.kinds.push(env.event.kind().to_owned());
        self.payloads.push(env.event.encode());
    }

    fn len(&self) -> usize {
        self.seqs.len()
    }
}

/// Copies every event of the SQLite log `from` into the PostgreSQL log at `url` (migrated
/// first when new) in one transaction; returns the number of events. Sessions the database
/// already holds are refused, naming them, and then nothing is written.
pub async fn import(url: &str, from: &LogReader) -> Result<u64, StoreError> {
    let (config, target) = parse(url)?;
    let mut client = connect(&config, &target).await?;
    schema::migrate(&mut client, &target).await?;
    let ctx = format!("{target}: importing");
    let sessions = from.sessions()?;
    let ids: Vec<&str> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    let tx = client
        .transaction()
        .await
        .map_err(server_error(ctx.clone()))?;
    let held = tx
        .query(
            "SELECT DISTINCT session_id FROM mull_events WHERE session_id = ANY($1) \
             ORDER BY session_id LIMIT 6",
            &[&ids],
        )
        .await
        .map_err(server_error(ctx.clone()))?;
    if !held.is_empty() {
        let names: Vec<&str> = held.iter().map(|r| r.get(0)).collect();
        return Err(StoreError::Server {
            context: ctx,
            message: format!(
                "the database already holds session(s) {}; nothing was imported",
                names.join(", ")
            ),
        });
    }
    let insert = tx
        .prepare(IMPORT)
        .await
        .map_err(server_error(ctx.clone()))?;
    // Each session's seqs in the file, in order: a seq's place there is its seq here.
    let mut numbering: HashMap<String, Vec<u64>> = HashMap::new();
    let mut batch = Batch::default();
    let mut total = 0u64;
    for session in &sessions {
        let id = &session.session_id;
        let mut old = Vec::new();
        let mut after = 0;
        loop {
            let page = from.session_page(id, after, PAGE)?;
            for env in &page {
                after = env.seq;
                old.push(env.seq);
                let mut env = env.clone();
                translate_origin(&mut env, |origin, seq| {
                    numbering
                        .get(origin)
                        .and_then(|seqs| seqs.binary_search(&seq).ok())
                        .map(|i| i as u64 + 1)
                })?;
                batch.push(&env, old.len() as u64);
            }
            if batch.len() >= PAGE {
                total += insert_batch(&tx, &insert, std::mem::take(&mut batch), &ctx).await?;
            }
            if page.len() < PAGE {
                break;
            }
        }
        numbering.insert(id.clone(), old);
    }
    total += insert_batch(&tx, &insert, batch, &ctx).await?;
    let touch = format!(
        "WITH imported AS (SELECT session_id, seq, at FROM mull_events WHERE session_id = ANY($1)) {}",
        schema::touch_sessions("imported")
    );
    tx.execute(&touch, &[&ids])
        .await
        .map_err(server_error(ctx.clone()))?;
    tx.commit().await.map_err(server_error(ctx))?;
    Ok(total)
}

async fn insert_batch(
    tx: &tokio_postgres::Transaction<'_>,
    insert: &tokio_postgres::Statement,
    b: Batch,
    ctx: &str,
) -> Result<u64, StoreError> {
    if b.len() == 0 {
        return Ok(0);
    }
    tx.execute(
        insert,
        &[
            &b.session_ids,
            &b.seqs,
            &b.turn_ids,
            &b.ats,
            &b.vs,
            &b.kinds,
            &b.payloads,
        ],
    )
    .await
    .map_err(server_error(ctx.to_owned()))
}

/// Rewrites a fork's `origin_seq` into the numbering of the log the event goes to (`map`:
/// (origin, seq there) → seq here); a fork point the copy does not hold is an error.
fn translate_origin(
    env: &mut Envelope,
    map: impl Fn(&str, u64) -> Option<u64>,
) -> Result<(), StoreError> {
    if let Event::SessionForked {
        origin, origin_seq, ..
    } = &mut env.event
    {
        *origin_seq = map(origin, *origin_seq).ok_or_else(|| StoreError::ForkChain {
            session_id: env.session_id.clone(),
            why: format!("starts at seq {origin_seq} of {origin}, which the copy does not hold"),
        })?;
    }
    Ok(())
}
