//! The help overlay, generated from the key map that handles the keys.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Clear, Row, Table};
use ratatui::Frame;

use crate::dash::keys::KEYMAP;

/// Draws every binding of [`KEYMAP`] in a centred box.
pub fn render(frame: &mut Frame, area: Rect) {
    let room = usize::from(area.height.saturating_sub(2));
    let mut rows: Vec<Row> = KEYMAP
        .iter()
        .map(|b| Row::new(vec![b.label.to_owned(), b.description.to_owned()]))
        .collect();
    if rows.len() > room {
        // The status bar below stays; what does not fit says so rather than vanish.
        let more = rows.len() + 1 - room;
        rows.truncate(room.saturating_sub(1));
        rows.push(Row::new(vec![
            "…".to_owned(),
            format!("{more} more: a taller terminal shows every key"),
        ]));
    }
    let height = (rows.len() as u16 + 2).min(area.height);
    let width = 84.min(area.width);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let table = Table::new(rows, [Constraint::Length(12), Constraint::Min(10)]).block(
        Block::bordered()
            .title(" keys (any key closes) ")
            .border_style(Style::new().fg(Color::Yellow))
            .title_style(Style::new().add_modifier(Modifier::BOLD)),
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(table, popup);
}
