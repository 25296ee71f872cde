//! Tables that fit their width: each column is as wide as its widest value, and when they do
//! not all fit the least important columns are dropped whole. One column may flex: it takes
//! what is left (a preview of the user's message, cut with "…" like any preview).

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Row;

/// One column of a fitted table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub header: &'static str,
    /// Lower is kept longer; 0 is never dropped.
    pub priority: u8,
    /// Takes the room left over, at least `min` cells.
    pub flex: bool,
    pub min: u16,
}

impl Column {
    pub const fn fixed(header: &'static str, priority: u8) -> Column {
        Column {
            header,
            priority,
            flex: false,
            min: 0,
        }
    }

    pub const fn flex(header: &'static str, min: u16) -> Column {
        Column {
            header,
            priority: 0,
            flex: true,
            min,
        }
    }
}

/// A table's columns after fitting: which of them show, and their constraints.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// Indices into the columns, in display order.
    pub shown: Vec<usize>,
    pub widths: Vec<Constraint>,
    /// Cells the flex column gets (0 when there is none).
    pub flex_width: u16,
}

/// Chooses the columns that fit in `available` cells (one cell between columns), given each
/// column's widest value.
pub fn fit_columns(columns: &[Column], content: &[u16], available: u16) -> Fitted {
    let width_of = |i: usize| -> u16 {
        let c = &columns[i];
        let w = content
            .get(i)
            .copied()
            .unwrap_or(0)
            .max(c.header.len() as u16);
        if c.flex {
            c.min.max(c.header.len() as u16)
        } else {
            w
        }
    };
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by_key(|&i| columns[i].priority);
    let mut shown = Vec::new();
    let mut used: u16 = 0;
    for i in order {
        let need = width_of(i) + u16::from(!shown.is_empty());
        if columns[i].priority == 0 || used + need <= available {
            used = used.saturating_add(need);
            shown.push(i);
        }
    }
    shown.sort_unstable();
    let flex_width = shown
        .iter()
        .find(|&&i| columns[i].flex)
        .map(|&i| width_of(i) + available.saturating_sub(used))
        .unwrap_or(0);
    let widths = shown
        .iter()
        .map(|&i| {
            if columns[i].flex {
                Constraint::Min(width_of(i))
            } else {
                let w = content
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .max(columns[i].header.len() as u16);
                Constraint::Length(w)
            }
        })
        .collect();
    Fitted {
        shown,
        widths,
        flex_width,
    }
}

/// The first row a bordered table with a header shows in `list` when row `selected` of its
/// rows must be visible: ratatui scrolls such a table just enough to show it. Drawing builds only
/// the rows from here that fit, so a list of thousands of sessions costs a screenful per frame.
pub fn first_shown(list: Rect, selected: Option<usize>) -> usize {
    let height = usize::from(list.height.saturating_sub(3));
    let at = selected.unwrap_or(0);
    if height > 0 && at >= height {
        at + 1 - height
    } else {
        0
    }
}

/// How many rows a bordered table with a header has room for in `list`.
pub fn room(list: Rect) -> usize {
    usize::from(list.height.saturating_sub(3))
}

/// The header row and body rows of a fitted table: `cells` holds every column of every row.
pub fn fitted_rows<'a>(
    columns: &[Column],
    cells: Vec<Vec<Line<'a>>>,
    available: u16,
) -> (Row<'a>, Vec<Row<'a>>, Vec<Constraint>, Fitted) {
    let mut content = vec![0u16; columns.len()];
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = content.get_mut(i) {
                *w = (*w).max(cell.width() as u16);
            }
        }
    }
    let fitted = fit_columns(columns, &content, available);
    let header = Row::new(
        fitted
            .shown
            .iter()
            .map(|&i| columns[i].header)
            .collect::<Vec<_>>(),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let flex = fitted.shown.iter().copied().find(|&i| columns[i].flex);
    let rows = cells
        .into_iter()
        .map(|row| {
            let mut row: Vec<Option<Line>> = row.into_iter().map(Some).collect();
            // The flex column's value is a preview: cut with "…" to the room it got.
            if let Some(cell) = flex.and_then(|i| row.get_mut(i)).and_then(Option::as_mut) {
                let room = usize::from(fitted.flex_width);
                if cell.width() > room {
                    let style = cell.spans.first().map(|s| s.style).unwrap_or_default();
                    *cell = Line::styled(super::ellipsize(&cell.to_string(), room), style);
                }
            }
            Row::new(
                fitted
                    .shown
                    .iter()
                    .map(|&i| row.get_mut(i).and_then(Option::take).unwrap_or_default())
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let widths = fitted.widths.clone();
    (header, rows, widths, fitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_tables_drop_the_least_important_columns_whole() {
        let columns = [
            Column::fixed("agent", 1),
            Column::flex("message", 10),
            Column::fixed("turns", 2),
            Column::fixed("last activity", 4),
            Column::fixed("tokens", 3),
        ];
        let content = [11, 40, 2, 8, 6];
        let wide = fit_columns(&columns, &content, 120);
        assert_eq!(wide.shown, vec![0, 1, 2, 3, 4]);
        assert_eq!(wide.flex_width, 120 - (11 + 5 + 13 + 6 + 4));
        // 11 + 1 + 10 + 1 + 5 + 1 + 6 = 35: the last activity column goes first.
        let narrow = fit_columns(&columns, &content, 40);
        assert_eq!(narrow.shown, vec![0, 1, 2, 4]);
        let tiny = fit_columns(&columns, &content, 12);
        assert_eq!(tiny.shown, vec![1], "the flex column always stays");
    }
}
