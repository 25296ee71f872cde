//! The full-text index of a session's conversation: an in-memory SQLite FTS5 index of the
//! projected messages (compaction applied: a summary is found, the messages it replaced are
//! not). The index is derived, never a second truth: it is built from the projection the first
//! time a session is searched and brought up to date with it before every search, so it sees
//! every message saved, changed (a client tool result) or compacted since.

use std::collections::HashMap;
use std::sync::Mutex;

use mull_core::{Role, UIMessage, UIPart};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

/// A search that could not run.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("message search index of session {session_id}: {source}")]
    Index {
        session_id: String,
        #[source]
        source: rusqlite::Error,
    },
}

/// One message that matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub message_id: String,
    pub role: Role,
    /// Where the message stands in the conversation (0-based).
    pub position: usize,
    /// The matched text around the query's words, which are in `[` `]`.
    pub snippet: String,
    /// BM25 relevance; lower is better.
    pub rank: f64,
}

/// The index and what it holds: message id → (rowid, indexed text).
struct Index {
    db: Connection,
    indexed: HashMap<String, (i64, String)>,
}

/// A session's message index, built on first use.
#[derive(Default)]
pub(crate) struct SearchIndex {
    index: Mutex<Option<Index>>,
}

/// The searchable text of a message: its texts, and each tool call's name, input and result.
/// Reasoning is left out.
pub fn message_text(message: &UIMessage) -> String {
    let mut out = Vec::new();
    for part in &message.parts {
        match part {
            UIPart::Text { text, .. } => out.push(text.clone()),
            UIPart::Tool(tool) => {
                out.push(tool.tool_name.clone());
                out.push(tool.input.to_string());
                if let Some(output) = &tool.output {
                    out.push(output.to_string());
                }
                if let Some(error) = &tool.error_text {
                    out.push(error.clone());
                }
            }
            UIPart::SourceUrl { url, title, .. } => {
                out.push(url.clone());
                out.extend(title.clone());
            }
            UIPart::SourceDocument { title, .. } => out.push(title.clone()),
            _ => {}
        }
    }
    out.join("\n")
}

/// The query as FTS5 text: every word quoted (so nothing is an operator), all required.
fn fts_query(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '\'')
        .filter(|t| !t.trim_matches('\'').is_empty())
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

impl Index {
    fn open() -> rusqlite::Result<Index> {
        let db = Connection::open_in_memory()?;
        db.execute_batch(
            "CREATE VIRTUAL TABLE messages USING fts5(
                 message_id UNINDEXED, text, tokenize = 'porter unicode61 remove_diacritics 2'
             );",
        )?;
        Ok(Index {
            db,
            indexed: HashMap::new(),
        })
    }

    /// Makes the index hold exactly `messages`, touching only what changed.
    fn sync(&mut self, messages: &[UIMessage]) -> rusqlite::Result<()> {
        let tx = self.db.transaction()?;
        let mut seen = HashMap::with_capacity(messages.len());
        for message in messages {
            let text = message_text(message);
            match self.indexed.get(&message.id) {
                Some((rowid, old)) if *old == text => {
                    seen.insert(message.id.clone(), (*rowid, text));
                }
                Some((rowid, _)) => {
                    tx.prepare_cached("UPDATE messages SET text = ?1 WHERE rowid = ?2")?
                        .execute(params![text, rowid])?;
                    seen.insert(message.id.clone(), (*rowid, text));
                }
                None => {
                    tx.prepare_cached("INSERT INTO messages (message_id, text) VALUES (?1, ?2)")?
                        .execute(params![message.id, text])?;
                    seen.insert(message.id.clone(), (tx.last_insert_rowid(), text));
                }
            }
        }
        for (id, (rowid, _)) in &self.indexed {
            if !seen.contains_key(id) {
                tx.prepare_cached("DELETE FROM messages WHERE rowid = ?1")?
                    .execute(params![rowid])?;
            }
        }
        tx.commit()?;
        self.indexed = seen;
        Ok(())
    }

    fn search(&self, query: &str, limit: usize) -> rusqlite::Result<Vec<(String, String, f64)>> {
        let Some(query) = fts_query(query) else {
            return Ok(Vec::new());
        };
        let mut stmt = self.db.prepare_cached(
            "SELECT message_id, snippet(messages, 1, '[', ']', '…', 16), rank
             FROM messages WHERE messages MATCH ?1 ORDER BY rank LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![query, limit], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
        rows.collect()
    }
}

impl SearchIndex {
    /// The messages among `messages` that contain every word of `query`, best first.
    pub(crate) fn run(
        &self,
        session_id: &str,
        messages: &[UIMessage],
        query: &str,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let wrap = |source| SearchError::Index {
            session_id: session_id.to_owned(),
            source,
        };
        let mut slot = self
            .index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = match slot.as_mut() {
            Some(index) => index,
            None => slot.insert(Index::open().map_err(wrap)?),
        };
        index.sync(messages).map_err(wrap)?;
        let rows = index.search(query, limit).map_err(wrap)?;
        Ok(rows
            .into_iter()
            .filter_map(|(message_id, snippet, rank)| {
                let position = messages.iter().position(|m| m.id == message_id)?;
                Some(SearchHit {
                    role: messages[position].role,
                    message_id,
                    position,
                    snippet,
                    rank,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(index: &SearchIndex, messages: &[UIMessage], q: &str) -> Vec<String> {
        index
            .run("s", messages, q, 10)
            .expect("searches")
            .into_iter()
            .map(|h| h.message_id)
            .collect()
    }

    #[test]
    fn queries_are_words_never_operators() {
        assert_eq!(
            fts_query("tea OR coffee"),
            Some("\"tea\" \"OR\" \"coffee\"".into())
        );
        assert_eq!(fts_query("  \"*-:()  "), None);
        assert_eq!(fts_query("user's"), Some("\"user's\"".into()));
    }

    #[test]
    fn the_index_follows_the_conversation_as_it_changes() {
        let index = SearchIndex::default();
        let mut messages = vec![
            UIMessage::user("u1", "I drink green tea every morning."),
            UIMessage::text("a1", Role::Assistant, "Noted: tea, mornings."),
            UIMessage::user("u2", "Running shoes for a marathon?"),
        ];
        assert_eq!(run(&index, &messages, "tea"), ["a1", "u1"]);
        assert_eq!(run(&index, &messages, "drinking TEA"), ["u1"]);
        assert!(run(&index, &messages, "coffee").is_empty());
        let hits = index.run("s", &messages, "marathon", 10).expect("searches");
        assert_eq!(hits[0].position, 2);
        assert_eq!(hits[0].snippet, "Running shoes for a [marathon]?");
        // A compaction: two messages replaced by a summary.
        messages.drain(0..2);
        messages.insert(0, UIMessage::user("sum", "Summary: the user likes tea."));
        assert_eq!(run(&index, &messages, "tea"), ["sum"]);
        // A message changed in place.
        messages[1] = UIMessage::user("u2", "Running shoes for a 10k?");
        assert!(run(&index, &messages, "marathon").is_empty());
        assert!(run(&index, &messages, "!!").is_empty());
    }
}
