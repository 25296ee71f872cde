//! mull's turn engine: the agentic loop with Think's lifecycle hooks, over the event log.
