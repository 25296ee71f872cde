//! Progress for the long commands (`import`, `export`, `recover`, `gen-bench-log`), drawn by
//! indicatif on standard error and only when standard error is a terminal: through a pipe, in a
//! script or in a test nothing is drawn, so what the commands print stays exactly their own.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What a bar counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Bytes of a file read.
    Bytes,
    /// Events written or read.
    Events,
}

/// A bar of `len` units labelled `what`, drawn only when standard error is a terminal.
pub(crate) fn bar(len: u64, unit: Unit, what: &str) -> ProgressBar {
    bar_on(std::io::stderr().is_terminal(), len, unit, what)
}

/// A spinner with the elapsed time, for work whose size is not known beforehand.
pub(crate) fn spinner(what: &str) -> ProgressBar {
    let spinner = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.set_message(what.to_owned());
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    spinner
}

/// [`bar`], with whether standard error is a terminal given.
fn bar_on(terminal: bool, len: u64, unit: Unit, what: &str) -> ProgressBar {
    if !terminal {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let counts = match unit {
        Unit::Bytes => "{bytes}/{total_bytes} ({bytes_per_sec})",
        Unit::Events => "{human_pos}/{human_len} events ({per_sec})",
    };
    let template = format!("{{msg}} [{{bar:30}}] {counts} {{eta}} left");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_drawn_only_on_a_terminal() {
        assert!(bar_on(false, 10, Unit::Bytes, "importing").is_hidden());
        let shown = bar_on(true, 10, Unit::Events, "exporting");
        assert_eq!(shown.length(), Some(10));
        assert_eq!(shown.message(), "exporting");
    }
}
