//! One module per subcommand; each is thin wiring over `mull-store` and the dashboard.

pub mod agent;
pub mod chat;
pub mod check;
pub mod dash;
pub mod demo;
pub mod diff;
pub mod export;
pub mod fork;
pub mod gen_bench_log;
pub mod import;
pub mod pg;
pub mod replay;
pub mod serve;
pub mod stats;
