//! The damage banner: a red line under the header while the log reads without rows that files
//! beside it hold (what `mull check` reports as "beside it"), so a partial log is never shown
//! as the whole of it. It names what is wrong and the two commands that say more and get the
//! rows back.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::dash::app::App;

/// Draws the banner into `area` (nothing when the log is whole).
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let Some(first) = app.damage.first() else {
        return;
    };
    let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let files = match app.damage.len() {
        1 => "a file".to_owned(),
        n => format!("{n} files"),
    };
    let kept = which(&first.file);
    let line = Line::from(vec![
        Span::styled(
            " ⚠ DAMAGED ",
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            format!(
                " shown without rows {files} beside the log hold{} · mull check {db} · mull \
                 recover {db} NEW.db · {kept}: {what}",
                if app.damage.len() == 1 { "s" } else { "" },
                db = app.db_label,
                what = first.what
            ),
            red,
        ),
    ]);
    frame.render_widget(Paragraph::new(line), area);
}

/// Which file beside the log a damaged one is, and why it was set aside, read from its name
/// (`<db>-records.<why>-<time>`, `<db>-wal.<why>-<time>`, or the record file in place); the
/// full names are `mull check`'s to list.
fn which(file: &std::path::Path) -> String {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let why = |rest: &str| rest.split('-').next().unwrap_or_default().to_owned();
    if let Some((_, rest)) = name.rsplit_once("-records.") {
        format!("the record file ({})", why(rest))
    } else if let Some((_, rest)) = name.rsplit_once("-wal.") {
        format!("the WAL ({})", why(rest))
    } else if name.ends_with("-records") {
        "the record file".to_owned()
    } else {
        name
    }
}
