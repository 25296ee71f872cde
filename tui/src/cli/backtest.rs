//! `mull backtest DB --policy P [--session ID ...] [--json] [--continue-with MODEL]`: re-runs
//! recorded demo sessions against new hook code — a built-in tool policy over the demo agent,
//! or an extension manifest loaded beside it — with the model's output and the tools' results
//! served from the log (no model is called, no tool runs), and reports every tool decision
//! that would change and where each recording stops being usable (see
//! `mull::engine::replay::backtest`). The log is only read; `--continue-with MODEL` goes on
//! live from each such point into a fork of the session (the only thing it writes).
//! Exits 1 when a decision would change, like diff(1).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use mull::core::{RandomIds, SystemClock};
use mull::engine::extension::Extensions;
use mull::engine::{Agent, Extension, Session, SessionOptions, TurnOptions};
use mull::policy::{Guarded, ToolPolicy};
use mull::replay::{BacktestOptions, BacktestReport, ReplayOptions, StopKind};
use mull_extensions::{start_all, Manifest};
use mull_store::{ForkPoint, Log, ReadLog, TurnRef};

use crate::cli::agent::SCRIPTED_DEMO;
use crate::cli::demo::builtin_policy;

/// What `mull backtest` takes.
#[derive(Debug, Args)]
pub struct BacktestArgs {
    /// The database of recorded demo sessions (only read): a SQLite file or a `postgres://`
    /// URL.
    pub db: PathBuf,
    /// The new hook code: a built-in tool policy laid over the demo agent (`guides-only`,
    /// `no-weather`, `demo`), or the path of an extension manifest (.toml) run beside it.
    #[arg(long)]
    pub policy: String,
    /// Only this session (repeat for more; default: every session of the log).
    #[arg(long = "session", value_name = "ID")]
    pub sessions: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where a recording stops being usable, go on live into a fork of the session with this
    /// model (`scripted-demo`, or any model spec `mull chat` takes) under the new policy.
    #[arg(long, value_name = "MODEL")]
    pub continue_with: Option<String>,
}

/// The new hook code, loaded.
struct Policy {
    agent: Arc<dyn Agent>,
    extensions: Extensions,
    /// The built-in policy, when it is one (a live continuation runs under it).
    builtin: Option<ToolPolicy>,
}

/// Runs the backtest and prints the report; returns whether a decision would change.
pub fn run(args: BacktestArgs) -> Result<bool> {
    let postgres = super::pg::url(&args.db).is_some();
    if !postgres && !args.db.exists() {
        bail!("{}: no such log", args.db.display());
    }
    if postgres && args.continue_with.is_some() {
        bail!(
            "--continue-with writes its forks into a SQLite log; on {} fork each session \
             with `mull fork {} --session S --turn T --continue` instead",
            args.db.display(),
            args.db.display()
        );
    }
    let reader = super::pg::open_log(&args.db)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let changed = runtime.block_on(backtest(args, &*reader));
    drop(runtime);
    changed
}

async fn backtest(args: BacktestArgs, reader: &dyn ReadLog) -> Result<bool> {
    let policy = load_policy(&args.policy).await?;
    let options = BacktestOptions {
        replay: ReplayOptions {
            extensions: policy.extensions.clone(),
            ..ReplayOptions::default()
        },
        ..BacktestOptions::default()
    };
    let report =
        mull::replay::backtest_with(reader, &args.sessions, Arc::clone(&policy.agent), options)
            .await
            .with_context(|| format!("backtesting {}", args.db.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if let Some(model) = &args.continue_with {
        continue_live(&args.db, &report, &policy, model).await?;
    }
    Ok(report.summary.decisions_changed > 0)
}

/// A built-in policy by name, or an extension manifest by path, started now: an extension
/// that cannot start is an error naming it, before anything is read or written.
async fn load_policy(spec: &str) -> Result<Policy> {
    let path = Path::new(spec);
    let is_manifest =
        path.is_file() || path.extension().is_some_and(|e| e == "toml" || e == "json");
    if !is_manifest {
        let policy = builtin_policy(spec)?;
        return Ok(Policy {
            agent: mull::demo::guarded_agent(policy.clone()),
            extensions: Extensions::new(),
            builtin: Some(policy),
        });
    }
    let manifest = Manifest::from_path(path)
        .with_context(|| format!("policy extension {}", path.display()))?;
    let name = manifest.name.clone();
    let started = start_all(vec![manifest]).await.with_context(|| {
        format!(
            "policy extension {name:?} ({}) failed to start; nothing was backtested",
            path.display()
        )
    })?;
    Ok(Policy {
        agent: mull::demo::agent(),
        extensions: started
            .into_iter()
            .map(|e| e as Arc<dyn Extension>)
            .collect(),
        builtin: None,
    })
}

/// For each session whose recording stopped being usable, forks it before that turn and runs
/// the turn again live under the new policy with `model`.
async fn continue_live(
    db: &Path,
    report: &BacktestReport,
    policy: &Policy,
    model: &str,
) -> Result<()> {
    let agent: Arc<dyn Agent> = match (model, &policy.builtin) {
        (SCRIPTED_DEMO, _) => Arc::clone(&policy.agent),
        (spec, Some(builtin)) => {
            let model = mull::providers::config::model_from_spec(spec, |name| {
                std::env::var(name).ok()
            })?;
            Arc::new(Guarded::new(mull::demo::agent(), builtin.clone()).with_model(model))
        }
        (_, None) => bail!(
            "--continue-with a real model needs a built-in policy; an extension policy goes on with --continue-with {SCRIPTED_DEMO}"
        ),
    };
    let log = Log::open(db).with_context(|| format!("opening {}", db.display()))?;
    let result = async {
        println!("\ncontinued live with {model}");
        for session in &report.sessions {
            let Some(stop) = session
                .stop
                .as_ref()
                .filter(|s| s.kind == StopKind::Unusable)
            else {
                continue;
            };
            let turn = match &stop.turn_id {
                Some(id) => TurnRef::Id(id.clone()),
                None => TurnRef::Ordinal(stop.turn),
            };
            let into = format!("{}-backtest", session.session_id);
            let mut options = SessionOptions::new(into.clone())
                .with_clock(Arc::new(SystemClock))
                .with_ids(Arc::new(RandomIds));
            options.extensions = policy.extensions.clone();
            let (forked, fork) = Session::fork(
                &log,
                Arc::clone(&agent),
                &session.session_id,
                &ForkPoint::BeforeTurn(turn),
                options,
            )
            .await
            .with_context(|| format!("forking {}", session.session_id))?;
            let outcome = forked
                .save_messages(fork.turn_messages.clone(), TurnOptions::default())
                .await?;
            println!(
                "  {:<16} turn {} → {into} ({:?}); compare: mull diff {db}@{} {db}@{into}",
                session.session_id,
                stop.turn,
                outcome.status,
                session.session_id,
                db = db.display()
            );
        }
        anyhow::Ok(())
    }
    .await;
    log.close()
        .with_context(|| format!("committing {}", db.display()))?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_store::LogReader;

    /// A log holding the deterministic demo session `demo`.
    fn demo_log(dir: &Path) -> PathBuf {
        let db = dir.join("demo.db");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let log = Log::open(&db).unwrap();
            let options = mull::demo::DemoOptions {
                deterministic: true,
                ..Default::default()
            };
            mull::demo::run(&log, options).await.unwrap();
            log.close().unwrap();
        });
        db
    }

    #[test]
    fn continuing_live_forks_before_the_turn_where_the_recording_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let db = demo_log(dir.path());
        let args = BacktestArgs {
            db: db.clone(),
            policy: "guides-only".to_owned(),
            sessions: vec!["demo".to_owned()],
            json: true,
            continue_with: Some(SCRIPTED_DEMO.to_owned()),
        };
        assert!(run(args).unwrap(), "a decision changes");
        let reader = LogReader::open(&db).unwrap();
        assert_eq!(reader.lineage("demo-backtest").unwrap(), vec!["demo"]);
        // The fork ran turn 2 again live: the forecast is blocked this time.
        let own = reader.session_events("demo-backtest", 0).unwrap();
        let decided: Vec<(String, String)> = own
            .iter()
            .filter_map(|e| match &e.event {
                mull::core::Event::ToolDecided { tool, action, .. } => {
                    Some((tool.clone(), action.as_str().to_owned()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            decided,
            [
                ("weather".to_owned(), "block".to_owned()),
                ("search_guides".to_owned(), "allow".to_owned())
            ]
        );
        assert_eq!(reader.load_session("demo-backtest").unwrap().turns.len(), 2);
    }

    #[test]
    fn a_policy_extension_that_cannot_start_is_named_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = demo_log(dir.path());
        let before = std::fs::read(&db).unwrap();
        let manifest = dir.path().join("strict.toml");
        std::fs::write(
            &manifest,
            "name = \"strict-policy\"\ncommand = \"mull-test-no-such-program\"\nhooks = [\"before_turn\"]\n",
        )
        .unwrap();
        let args = BacktestArgs {
            db: db.clone(),
            policy: manifest.display().to_string(),
            sessions: Vec::new(),
            json: false,
            continue_with: Some(SCRIPTED_DEMO.to_owned()),
        };
        let err = run(args).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("policy extension \"strict-policy\"")
                && text.contains("failed to start")
                && text.contains("mull-test-no-such-program"),
            "{text}"
        );
        assert_eq!(std::fs::read(&db).unwrap(), before, "nothing written");
    }
}
