//! One module per subcommand; each is thin wiring over `mull-store` and the dashboard.

pub mod agent;
pub mod approve;
pub mod backtest;
pub mod chat;
pub mod chat_view;
pub mod check;
pub mod dash;
pub mod demo;
pub mod diff;
pub mod exit;
pub mod export;
pub mod fork;
pub mod gen_bench_log;
pub mod import;
pub mod integrity;
pub mod mcp;
pub mod otlp_export;
pub mod pg;
pub mod replay;
pub mod serve;
pub mod stats;
