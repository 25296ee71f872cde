//! The command line's tables: columns padded and aligned by comfy-table, without borders, so a
//! table reads as plain text in a terminal, through a pipe and in a test, each line indented
//! under the heading it belongs to.

use comfy_table::{presets, CellAlignment, Table};

/// Builds a borderless table of `rows` under `header`, indented by two spaces; the columns in
/// `right` (by position) are right-aligned, as numbers are. Trailing blanks are trimmed and
/// every line ends with a newline.
pub(crate) fn render(header: Option<&[&str]>, right: &[usize], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING);
    if let Some(header) = header {
        table.set_header(header.iter().copied());
    }
    for row in rows {
        table.add_row(row);
    }
    for &column in right {
        if let Some(column) = table.column_mut(column) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
        .trim_fmt()
        .lines()
        .map(|line| format!(" {line}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_numbers_right_aligned_and_lines_trimmed() {
        let rows = vec![
            vec![
                "turn_1".to_owned(),
                "completed".to_owned(),
                "1200".to_owned(),
            ],
            vec![
                "a-longer-turn-id".to_owned(),
                "error".to_owned(),
                "7".to_owned(),
            ],
        ];
        let out = render(Some(&["turn", "status", "in"]), &[2], rows);
        assert_eq!(
            out,
            "  turn              status       in\n\
            \x20 turn_1            completed  1200\n\
            \x20 a-longer-turn-id  error         7\n"
        );
        assert!(out.lines().all(|l| !l.ends_with(' ')));
    }
}
