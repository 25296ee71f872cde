//! What `configure_session` sets up once per session: context blocks (and the system prompt
//! built from them), compaction and when it runs, context-overflow recovery (reactive and
//! proactive) and recovery from transient errors, the token counter, skills, and the tools the
//! session itself offers the model.
//!
//! ```no_run
//! # use mull_engine::{SessionConfig, ContextBlock, CompactOptions, compact_function, summarizer, ProactiveGuard};
//! # fn configure(session: SessionConfig) -> SessionConfig {
//! session
//!     .with_context("soul", ContextBlock::provided(|| async { Ok("You are a helpful coding assistant.".to_owned()) }))
//!     .with_context("memory", ContextBlock::writable("Learned facts about the user.", 1100))
//!     .on_compaction(compact_function(CompactOptions::new(summarizer(|prompt| async move {
//!         Ok(format!("(a model call would summarize {} characters)", prompt.len()))
//!     }))))
//!     .compact_after(100_000)
//!     .proactive(ProactiveGuard::new(200_000))
//!     .with_cached_prompt()
//!     .with_search_tool()
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use mull_core::{CompactionReason, UIMessage};

use crate::error::HookError;

pub(crate) mod block;
pub mod budget;
pub mod skills;
pub mod tokens;

use block::{ContextBlock, ContextError};
use skills::Skill;
use tokens::{CharEstimator, SharedTokenCounter, TokenCounter};

/// What a compaction callback is asked to shorten.
#[derive(Clone)]
pub struct CompactionRequest {
    /// The conversation as it stands (the running turn's own message is not part of it).
    pub messages: Vec<UIMessage>,
    pub reason: CompactionReason,
    /// 1 for the first compaction of this turn (for reactive recovery: the retry it prepares).
    pub attempt: u32,
    /// The session's token counter, for the counts the result reports.
    pub counter: SharedTokenCounter,
    /// A fresh id, from the session's id source, for a summary message.
    pub summary_id: String,
}

impl std::fmt::Debug for CompactionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionRequest")
            .field("messages", &self.messages.len())
            .field("reason", &self.reason)
            .field("attempt", &self.attempt)
            .field("summary_id", &self.summary_id)
            .finish()
    }
}

/// What a compaction callback did: which messages it replaced and by what.
#[derive(Debug, Clone, Default)]
pub struct Compaction {
    /// Ids of the messages to remove from the conversation.
    pub replaced_ids: Vec<String>,
    /// A message shown where the first replaced one stood.
    pub summary: Option<UIMessage>,
    /// Tokens of the conversation before and after; the engine counts them with the session's
    /// counter when both are left at 0.
    pub tokens_before: u64,
    pub tokens_after: u64,
}

pub(crate) type CompactionFn =
    dyn Fn(CompactionRequest) -> BoxFuture<'static, Result<Compaction, HookError>> + Send + Sync;

/// Recovery from a context-overflow error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    /// Compact and retry when `classify_chat_error` answers `context_overflow`.
    pub reactive: bool,
    /// How many compact-and-retry rounds a turn may take.
    pub max_retries: u32,
}

impl Default for ContextOverflow {
    fn default() -> ContextOverflow {
        ContextOverflow {
            reactive: false,
            max_retries: 1,
        }
    }
}

/// Bounded recovery from errors `classify_chat_error` calls transient or a rate limit (Think
/// 0.24): the turn runs again under the same request id after a backoff that grows from
/// `first_delay` by doubling up to `max_delay`, with jitter (see [`ChatRecovery::delay`]), at
/// most `max_attempts` times; then it ends with a terminal error and `on_recovery_exhausted`
/// runs. Off (`max_attempts` 0) by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatRecovery {
    /// How many times one request may be run again (0: recovery off).
    pub max_attempts: u32,
    /// The longest wait before the first recovery attempt (1 s).
    pub first_delay: std::time::Duration,
    /// The longest wait, however many attempts came before (30 s): the cap.
    pub max_delay: std::time::Duration,
}

impl ChatRecovery {
    /// Up to `max_attempts` recoveries, waiting at most 1 s, 2 s, 4 s … and never over 30 s.
    pub fn new(max_attempts: u32) -> ChatRecovery {
        ChatRecovery {
            max_attempts,
            first_delay: std::time::Duration::from_secs(1),
            max_delay: std::time::Duration::from_secs(30),
        }
    }

    /// Whether any recovery runs.
    pub fn is_on(&self) -> bool {
        self.max_attempts > 0
    }

    /// The wait before recovery attempt `n` (0-based) of the request `key` names (its session
    /// and request id). The exponential delay `first_delay · 2ⁿ`, capped at `max_delay`, is
    /// the most it waits; the wait is drawn between half of that and all of it ("equal
    /// jitter"), so the many turns one overloaded server failed together do not all come back
    /// at the same moment. The draw is seeded from `key`, not from a random source: the same
    /// request waits the same on every run and platform, so a replay re-derives the `delay_ms`
    /// its recording wrote (and a change here shows as a divergence, never silently).
    pub fn delay(&self, n: u32, key: &str) -> std::time::Duration {
        use backon::BackoffBuilder;
        use std::hash::Hasher;
        // FNV-1a over the bytes: a fixed function, unlike std's hasher, which may change.
        let mut seed = fnv::FnvHasher::default();
        seed.write(key.as_bytes());
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        // backon adds a jitter of up to 100% to each delay: halving its bounds draws between
        // half and all of the capped exponential delay.
        let drawn = backon::ExponentialBuilder::default()
            .with_min_delay(self.first_delay / 2)
            .with_max_delay(self.max_delay / 2)
            .with_factor(2.0)
            .with_jitter()
            .with_jitter_seed(seed.finish())
            .with_max_times(n.saturating_add(1))
            .build()
            .nth(n)
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        // Whole milliseconds: the wait is exactly the `delay_ms` the log records.
        std::time::Duration::from_millis(u64::try_from(drawn.as_millis()).unwrap_or(u64::MAX))
    }
}

impl Default for ChatRecovery {
    fn default() -> ChatRecovery {
        ChatRecovery::new(0)
    }
}

/// The proactive overflow guard: compact between steps before the context fills up, instead of
/// waiting for the provider to refuse a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProactiveGuard {
    /// The model's context window, in input tokens.
    pub max_input_tokens: u64,
    /// The share of the window at which a step's input triggers compaction (0.9).
    pub headroom: f64,
    /// How many proactive compactions one turn may run (1).
    pub max_compactions: u32,
}

impl ProactiveGuard {
    /// A guard for a window of `max_input_tokens`, with headroom 0.9 and one compaction a turn.
    pub fn new(max_input_tokens: u64) -> ProactiveGuard {
        ProactiveGuard {
            max_input_tokens,
            headroom: 0.9,
            max_compactions: 1,
        }
    }

    /// The input-token count at which the guard compacts.
    pub fn threshold(&self) -> u64 {
        // Float to integer: saturating by definition, and windows are far below 2^53.
        (self.max_input_tokens as f64 * self.headroom).ceil() as u64
    }
}

/// The session's configuration, built in `configure_session`.
#[derive(Clone)]
pub struct SessionConfig {
    pub(crate) compaction: Option<Arc<CompactionFn>>,
    pub(crate) context_overflow: ContextOverflow,
    pub(crate) recovery: ChatRecovery,
    pub(crate) redeliver_chat_response: bool,
    pub(crate) proactive: Option<ProactiveGuard>,
    pub(crate) compact_after: Option<u64>,
    pub(crate) blocks: Vec<(String, ContextBlock)>,
    pub(crate) cached_prompt: bool,
    pub(crate) search_tool: bool,
    pub(crate) skills: Vec<Skill>,
    pub(crate) counter: SharedTokenCounter,
    pub(crate) budget: Option<budget::Budget>,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            compaction: None,
            context_overflow: ContextOverflow::default(),
            recovery: ChatRecovery::default(),
            redeliver_chat_response: true,
            proactive: None,
            compact_after: None,
            blocks: Vec::new(),
            cached_prompt: false,
            search_tool: false,
            skills: Vec::new(),
            counter: Arc::new(CharEstimator),
            budget: None,
        }
    }
}

impl SessionConfig {
    /// A configuration with nothing set: no blocks, no compaction, overflow recovery off.
    pub fn new() -> SessionConfig {
        SessionConfig::default()
    }

    /// Adds a context block. Once a session has blocks, its system prompt is built from them
    /// (in the order they were added) instead of `Agent::system_prompt`. Adding a name again
    /// replaces the earlier block in place.
    pub fn with_context(mut self, name: impl Into<String>, block: ContextBlock) -> SessionConfig {
        let name = name.into();
        match self.blocks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = block,
            None => self.blocks.push((name, block)),
        }
        self
    }

    /// Freezes the built system prompt across turns so providers' prompt caches hit: block
    /// providers run once (when a block has no value yet), and the prompt changes only when a
    /// block changes — an event in the log.
    pub fn with_cached_prompt(mut self) -> SessionConfig {
        self.cached_prompt = true;
        self
    }

    /// The callback that shortens the conversation when it must be compacted
    /// ([`crate::compact_function`] makes a ready one).
    pub fn on_compaction<F, Fut>(mut self, f: F) -> SessionConfig
    where
        F: Fn(CompactionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Compaction, HookError>> + Send + 'static,
    {
        self.compaction = Some(Arc::new(move |req| Box::pin(f(req))));
        self
    }

    /// Compacts before a turn whenever the conversation holds more than `tokens` (counted with
    /// the session's token counter).
    pub fn compact_after(mut self, tokens: u64) -> SessionConfig {
        self.compact_after = Some(tokens);
        self
    }

    /// Counts tokens with `counter` instead of the four-characters-a-token estimate.
    pub fn token_counter(mut self, counter: impl TokenCounter + 'static) -> SessionConfig {
        self.counter = Arc::new(counter);
        self
    }

    /// Turns reactive overflow recovery on or off, with at most `max_retries` rounds per turn.
    pub fn context_overflow(mut self, reactive: bool, max_retries: u32) -> SessionConfig {
        self.context_overflow = ContextOverflow {
            reactive,
            max_retries,
        };
        self
    }

    /// Turns bounded recovery from transient and rate-limit errors on (see [`ChatRecovery`]).
    pub fn chat_recovery(mut self, recovery: ChatRecovery) -> SessionConfig {
        self.recovery = recovery;
        self
    }

    /// Whether `on_chat_response` runs again, with `recovered: true`, for a turn whose end
    /// reached the log but whose hook never returned (the process died first), as Think does.
    /// On by default: each turn's final `turn_finished` marks the delivery owed and a
    /// `chat_response_delivered` follows the hook's return, so the next open calls the hook
    /// exactly for the requests still owed — a turn a crash cut short and the reopen ended as
    /// interrupted included — once each; the hook's effects must then be idempotent by request
    /// id. `false` opts out: the hook runs at most once, no delivery is recorded, and an open
    /// redelivers nothing.
    pub fn redeliver_chat_response(mut self, on: bool) -> SessionConfig {
        self.redeliver_chat_response = on;
        self
    }

    /// Whether `on_chat_response` is redelivered after a crash.
    pub fn redelivers_chat_response(&self) -> bool {
        self.redeliver_chat_response
    }

    /// The recovery settings for transient and rate-limit errors.
    pub fn recovery(&self) -> ChatRecovery {
        self.recovery
    }

    /// Turns the proactive overflow guard on.
    pub fn proactive(mut self, guard: ProactiveGuard) -> SessionConfig {
        self.proactive = Some(guard);
        self
    }

    /// Caps what the session's model calls may spend: checked before every model call, a
    /// used-up limit ends the turn with a `budget_exceeded` event.
    pub fn budget(mut self, budget: budget::Budget) -> SessionConfig {
        self.budget = Some(budget);
        self
    }

    /// The configured budget held to `cap` too (see [`budget::Budget::capped_by`]); `cap`
    /// itself when none was configured.
    pub(crate) fn budget_capped_by(mut self, cap: &budget::Budget) -> SessionConfig {
        self.budget = Some(match self.budget.take() {
            Some(own) => own.capped_by(cap),
            None => cap.clone(),
        });
        self
    }

    /// The budget, when one is set.
    pub fn budget_settings(&self) -> Option<&budget::Budget> {
        self.budget.as_ref()
    }

    /// Offers the model a `search_messages` tool over the session's history.
    pub fn with_search_tool(mut self) -> SessionConfig {
        self.search_tool = true;
        self
    }

    /// Adds a skill the model may load (see [`crate::skills`]): the system prompt lists it and
    /// the `load_skill` tool returns its instructions. Adding a name again replaces it.
    pub fn with_skill(mut self, skill: Skill) -> SessionConfig {
        match self.skills.iter_mut().find(|s| s.name == skill.name) {
            Some(slot) => *slot = skill,
            None => self.skills.push(skill),
        }
        self
    }

    /// The skills, in the order they were added.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The overflow recovery settings.
    pub fn overflow(&self) -> ContextOverflow {
        self.context_overflow
    }

    /// The proactive guard, when on.
    pub fn proactive_guard(&self) -> Option<ProactiveGuard> {
        self.proactive
    }

    /// Whether a compaction callback is registered.
    pub fn has_compaction(&self) -> bool {
        self.compaction.is_some()
    }

    /// The context blocks, in prompt order.
    pub fn blocks(&self) -> &[(String, ContextBlock)] {
        &self.blocks
    }

    /// The session's token counter.
    pub fn counter(&self) -> &SharedTokenCounter {
        &self.counter
    }

    /// The block called `name`.
    pub(crate) fn block(&self, name: &str) -> Option<&ContextBlock> {
        self.blocks.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }
}

/// What `configure_context` sets up (Think 0.24 splits the prompt's blocks from
/// `configure_session`): the context blocks the system prompt is built from, and whether the
/// built prompt is cached. It starts with the blocks `configure_session` added (the older
/// chain, still accepted), so the hook sees them and may replace any by name.
///
/// ```no_run
/// # use mull_engine::{ContextBlock, ContextConfig};
/// # fn configure(context: ContextConfig) -> ContextConfig {
/// context
///     .with_context("soul", ContextBlock::provided(|| async { Ok("You are terse.".to_owned()) }))
///     .with_context("memory", ContextBlock::writable("Learned facts about the user.", 1100))
///     .with_cached_prompt()
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ContextConfig {
    blocks: Vec<(String, ContextBlock)>,
    cached_prompt: bool,
}

impl ContextConfig {
    /// Adds a context block (adding a name again replaces the earlier block in place), as
    /// [`SessionConfig::with_context`] does.
    pub fn with_context(mut self, name: impl Into<String>, block: ContextBlock) -> ContextConfig {
        let name = name.into();
        match self.blocks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = block,
            None => self.blocks.push((name, block)),
        }
        self
    }

    /// Freezes the built system prompt across turns ([`SessionConfig::with_cached_prompt`]).
    pub fn with_cached_prompt(mut self) -> ContextConfig {
        self.cached_prompt = true;
        self
    }

    /// The names of the blocks, in prompt order.
    pub fn block_names(&self) -> Vec<&str> {
        self.blocks.iter().map(|(n, _)| n.as_str()).collect()
    }
}

impl SessionConfig {
    /// The context part of this configuration, for `configure_context` to extend.
    pub(crate) fn context(&self) -> ContextConfig {
        ContextConfig {
            blocks: self.blocks.clone(),
            cached_prompt: self.cached_prompt,
        }
    }

    /// Takes the blocks and prompt caching `configure_context` settled on.
    pub(crate) fn with_context_config(mut self, context: ContextConfig) -> SessionConfig {
        self.blocks = context.blocks;
        self.cached_prompt = context.cached_prompt;
        self
    }
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("compaction", &self.compaction.is_some())
            .field("context_overflow", &self.context_overflow)
            .field("recovery", &self.recovery)
            .field("proactive", &self.proactive)
            .field("compact_after", &self.compact_after)
            .field(
                "blocks",
                &self
                    .blocks
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("cached_prompt", &self.cached_prompt)
            .field("search_tool", &self.search_tool)
            .field(
                "skills",
                &self
                    .skills
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Checks a write against the block's existence, writability and budget; returns its tokens.
pub(crate) fn check_write(
    config: &SessionConfig,
    block: &str,
    content: &str,
    by_model: bool,
) -> Result<u64, ContextError> {
    let Some(spec) = config.block(block) else {
        let known: Vec<&str> = config.blocks.iter().map(|(n, _)| n.as_str()).collect();
        return Err(ContextError::UnknownBlock {
            block: block.to_owned(),
            known: known.join(", "),
        });
    };
    if by_model && !spec.is_writable() {
        return Err(ContextError::NotWritable {
            block: block.to_owned(),
        });
    }
    let tokens = config.counter.count_text(content);
    match spec.max_tokens {
        Some(max_tokens) if tokens > max_tokens => Err(ContextError::OverBudget {
            block: block.to_owned(),
            tokens,
            max_tokens,
        }),
        _ => Ok(tokens),
    }
}
