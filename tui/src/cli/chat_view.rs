//! How `mull chat` shows a streaming turn: the answer on standard output; the model's
//! reasoning and tool activity on standard error, each on lines of its own, so the three never
//! run together. At a terminal reasoning is dim and tool activity coloured; piped, no escape
//! codes are written at all.

use std::io::{self, Write};

use mull::core::StreamPart;

const DIM: &str = "\x1b[2m";
const CYAN: &str = "\x1b[36m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// What was written last, so a change of kind starts a new line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    Answer,
    Reasoning,
    Tool,
}

/// Draws one turn's parts onto an answer stream and an activity stream.
pub struct TurnView<O, E> {
    out: O,
    err: E,
    /// Escape codes on the activity stream (it is a terminal).
    colour: bool,
    last: Last,
    /// The answer stream is in the middle of a line.
    answer_open: bool,
    /// Any answer text was written this turn.
    answered: bool,
}

impl<O: Write, E: Write> TurnView<O, E> {
    /// A view writing answers to `out` and activity to `err`, coloured when `colour`.
    pub fn new(out: O, err: E, colour: bool) -> Self {
        Self {
            out,
            err,
            colour,
            last: Last::Nothing,
            answer_open: false,
            answered: false,
        }
    }

    /// Shows one part.
    pub fn part(&mut self, part: &StreamPart) -> io::Result<()> {
        match part {
            // A later text block (after a tool call, say) starts on a line of its own.
            StreamPart::TextStart { .. } if self.answer_open => {
                writeln!(self.out)?;
                self.answer_open = false;
            }
            StreamPart::TextDelta { text, .. } => {
                self.leave(Last::Answer)?;
                write!(self.out, "{text}")?;
                self.answer_open = !text.is_empty() || self.answer_open;
                self.answered = true;
                self.out.flush()?;
            }
            StreamPart::ReasoningStart { .. } => {
                self.leave(Last::Reasoning)?;
                let (on, off) = self.paint(DIM);
                write!(self.err, "{on}thinking: {off}")?;
            }
            StreamPart::ReasoningDelta { text, .. } => {
                if self.last != Last::Reasoning {
                    self.leave(Last::Reasoning)?;
                    let (on, off) = self.paint(DIM);
                    write!(self.err, "{on}thinking: {off}")?;
                }
                let (on, off) = self.paint(DIM);
                write!(self.err, "{on}{text}{off}")?;
                self.err.flush()?;
            }
            StreamPart::ReasoningEnd { .. } if self.last == Last::Reasoning => {
                writeln!(self.err)?;
                self.last = Last::Nothing;
            }
            StreamPart::ToolCall {
                tool_name, input, ..
            } => self.activity(CYAN, &format!("[tool {tool_name} {input}]"))?,
            StreamPart::ToolResult {
                output,
                preliminary: false,
                ..
            } => self.activity(CYAN, &format!("[→ {output}]"))?,
            StreamPart::ToolError { error, .. } => {
                self.activity(RED, &format!("[tool error: {error}]"))?
            }
            StreamPart::Error { message } => {
                self.activity(RED, &format!("[model error: {message}]"))?
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether any answer text was shown this turn.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Ends the turn: the answer's line is closed (a turn with no answer leaves an empty
    /// line, so each turn is one line or more of standard output).
    pub fn finish(&mut self) -> io::Result<()> {
        if self.answer_open || !self.answered {
            writeln!(self.out)?;
        }
        self.answer_open = false;
        self.leave(Last::Nothing)?;
        self.out.flush()?;
        self.err.flush()
    }

    /// One line of tool activity or an error.
    fn activity(&mut self, colour: &'static str, line: &str) -> io::Result<()> {
        self.leave(Last::Tool)?;
        let (on, off) = self.paint(colour);
        writeln!(self.err, "{on}{line}{off}")?;
        self.err.flush()
    }

    /// Closes the line of whatever kind was written last before writing `next`.
    fn leave(&mut self, next: Last) -> io::Result<()> {
        match self.last {
            Last::Reasoning if next != Last::Reasoning => writeln!(self.err)?,
            // The activity goes to the other stream: the answer's line ends first.
            Last::Answer if next != Last::Answer && self.answer_open => {
                writeln!(self.out)?;
                self.out.flush()?;
                self.answer_open = false;
            }
            _ => {}
        }
        self.last = next;
        Ok(())
    }

    fn paint(&self, colour: &'static str) -> (&'static str, &'static str) {
        if self.colour {
            (colour, RESET)
        } else {
            ("", "")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(part: &str) -> StreamPart {
        StreamPart::TextDelta {
            id: "t".into(),
            text: part.into(),
        }
    }

    fn reasoning(part: &str) -> StreamPart {
        StreamPart::ReasoningDelta {
            id: "r".into(),
            text: part.into(),
        }
    }

    fn turn() -> Vec<StreamPart> {
        vec![
            StreamPart::ReasoningStart { id: "r".into() },
            reasoning("the user wants "),
            reasoning("the weather"),
            StreamPart::ReasoningEnd { id: "r".into() },
            StreamPart::TextStart { id: "t".into() },
            text("Checking."),
            StreamPart::ToolCall {
                call_id: "c".into(),
                tool_name: "weather".into(),
                input: "{}".into(),
            },
            StreamPart::TextStart { id: "t2".into() },
            text("Sunny."),
        ]
    }

    fn show(colour: bool) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut view = TurnView::new(&mut out, &mut err, colour);
        for part in turn() {
            view.part(&part).expect("writes");
        }
        view.finish().expect("writes");
        (
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    #[test]
    fn reasoning_tool_calls_and_the_answer_never_share_a_line() {
        let (out, err) = show(false);
        assert_eq!(out, "Checking.\nSunny.\n");
        assert_eq!(
            err,
            "thinking: the user wants the weather\n[tool weather {}]\n"
        );
    }

    #[test]
    fn colour_only_when_asked_for() {
        let (_, plain) = show(false);
        assert!(!plain.contains('\x1b'), "{plain:?}");
        let (out, coloured) = show(true);
        assert!(
            !out.contains('\x1b'),
            "the answer is never painted: {out:?}"
        );
        assert!(
            coloured.contains(&format!("{DIM}the user wants {RESET}")),
            "{coloured:?}"
        );
        assert!(
            coloured.contains(&format!("{CYAN}[tool weather {{}}]{RESET}")),
            "{coloured:?}"
        );
    }
}
