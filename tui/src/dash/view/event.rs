//! One event's full JSON.

use ratatui::layout::Rect;
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use crate::dash::app::App;

/// Draws the selected event as pretty JSON, scrolled by the user.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let (title, text) = match app.selected_event() {
        Some(env) => (
            format!(
                " seq {} · {} · ←/→ neighbouring events ",
                env.seq,
                env.kind()
            ),
            serde_json::to_string_pretty(env).unwrap_or_else(|e| format!("cannot show: {e}")),
        ),
        None => (" event ".to_owned(), "no event selected".to_owned()),
    };
    let paragraph = Paragraph::new(text)
        .block(Block::bordered().title(title))
        .scroll((app.event_scroll, 0));
    frame.render_widget(paragraph, area);
}
