//! The prompt of `mull chat` at a terminal: reedline's line editor (editing keys, a history
//! kept in a file and searched with the arrow keys and Ctrl-R), run on a thread of its own that
//! reads a line only when the chat asks for one.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;

use reedline::{
    FileBackedHistory, Prompt, PromptEditMode, PromptHistorySearch, PromptHistorySearchStatus,
    Reedline,
};

/// How many lines the history file keeps.
const HISTORY_LINES: usize = 1000;

/// What the person did at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A line, entered.
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupt,
    /// Ctrl-D, or the terminal went away.
    End,
}

/// `> `, and nothing on the right: the chat's prompt.
struct ChatPrompt;

impl Prompt for ChatPrompt {
    fn render_prompt_left(&self) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn render_prompt_right(&self) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> Cow<'_, str> {
        Cow::Borrowed("> ")
    }

    fn render_prompt_multiline_indicator(&self) -> Cow<'_, str> {
        Cow::Borrowed(". ")
    }

    fn render_prompt_history_search_indicator(&self, search: PromptHistorySearch) -> Cow<'_, str> {
        let failing = match search.status {
            PromptHistorySearchStatus::Passing => "",
            PromptHistorySearchStatus::Failing => "failing ",
        };
        Cow::Owned(format!("({failing}search: {}) ", search.term))
    }
}

/// The line editor, with its history in `history` when that file can be opened (otherwise the
/// history lasts this chat, and standard error says why).
fn editor(history: Option<PathBuf>) -> Reedline {
    let editor = Reedline::create();
    let Some(path) = history else {
        return editor;
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("[history not kept: creating {}: {e}]", dir.display());
            return editor;
        }
    }
    match FileBackedHistory::with_file(HISTORY_LINES, path.clone()) {
        Ok(file) => editor.with_history(Box::new(file)),
        Err(e) => {
            eprintln!("[history not kept: {}: {e}]", path.display());
            editor
        }
    }
}

/// Reads one line each time `asked` receives, handing it to `send` until `send` says the chat
/// is gone or input ends.
pub fn edit_lines(
    asked: Receiver<()>,
    history: Option<PathBuf>,
    mut send: impl FnMut(Input) -> bool,
) {
    let mut editor = editor(history);
    let mut kept = true;
    while asked.recv().is_ok() {
        let input = match editor.read_line(&ChatPrompt) {
            Ok(reedline::Signal::Success(line)) => {
                // Written now: the chat may exit while this thread waits, and reedline writes
                // its history file only when asked or when the editor is dropped.
                if let Err(e) = editor.sync_history() {
                    if std::mem::take(&mut kept) {
                        eprintln!("[history not kept: {e}]");
                    }
                }
                Input::Line(line)
            }
            Ok(reedline::Signal::CtrlC) => Input::Interrupt,
            Ok(reedline::Signal::CtrlD) => Input::End,
            Ok(_) => Input::End,
            Err(e) => {
                eprintln!("[input failed: {e}]");
                Input::End
            }
        };
        let end = input == Input::End;
        if !send(input) || end {
            return;
        }
    }
}
