//! The key map: one table of (keys, action, description) that both handles key presses and
//! generates the help overlay, so the two cannot disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Everything a user can ask the dashboard to do with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Quit,
    Up,
    Down,
    PageUp,
    PageDown,
    First,
    Last,
    Enter,
    Back,
    Follow,
    Pause,
    Replay,
    Speed,
    StepBack,
    StepForward,
    ScrubBack,
    ScrubForward,
    Filter,
    NextMatch,
    PrevMatch,
    HideFilter,
    FocusNext,
    FocusPrev,
    Mark,
    Diff,
    /// Open the sub-agent a tool call ran.
    SubagentIn,
    /// Back from a sub-agent to its parent's tool call.
    SubagentOut,
    /// Approve the selected call waiting for approval (after a confirmation).
    Approve,
    /// Deny the selected call waiting for approval (after a confirmation).
    Deny,
    /// Select the next call waiting for approval.
    NextApproval,
    Help,
}

/// A key with its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key(pub KeyCode, pub KeyModifiers);

const fn plain(code: KeyCode) -> Key {
    Key(code, KeyModifiers::NONE)
}

const fn ch(c: char) -> Key {
    Key(KeyCode::Char(c), KeyModifiers::NONE)
}

/// One row of the key map.
#[derive(Debug)]
pub struct Binding {
    pub keys: &'static [Key],
    /// How the keys are written in the help.
    pub label: &'static str,
    pub action: Action,
    pub description: &'static str,
}

/// Every key the dashboard understands (outside the filter prompt, which takes text).
pub const KEYMAP: &[Binding] = &[
    Binding {
        keys: &[ch('q'), Key(KeyCode::Char('c'), KeyModifiers::CONTROL)],
        label: "q, ctrl-c",
        action: Action::Quit,
        description: "quit",
    },
    Binding {
        keys: &[plain(KeyCode::Up), ch('k')],
        label: "↑, k",
        action: Action::Up,
        description: "previous row, stops following (wheel: scroll; click: select)",
    },
    Binding {
        keys: &[plain(KeyCode::Down), ch('j')],
        label: "↓, j",
        action: Action::Down,
        description: "next row (event view: scroll down)",
    },
    Binding {
        keys: &[plain(KeyCode::PageUp)],
        label: "PgUp",
        action: Action::PageUp,
        description: "a page up",
    },
    Binding {
        keys: &[plain(KeyCode::PageDown)],
        label: "PgDn",
        action: Action::PageDown,
        description: "a page down",
    },
    Binding {
        keys: &[plain(KeyCode::Home), ch('g')],
        label: "Home, g",
        action: Action::First,
        description: "first row (replay: scrub to the start)",
    },
    Binding {
        keys: &[
            plain(KeyCode::End),
            Key(KeyCode::Char('G'), KeyModifiers::SHIFT),
            ch('G'),
        ],
        label: "End, G",
        action: Action::Last,
        description: "last row (replay: scrub to the end)",
    },
    Binding {
        keys: &[plain(KeyCode::Enter)],
        label: "Enter",
        action: Action::Enter,
        description: "drill in: session → turns → timeline → event JSON (or click twice)",
    },
    Binding {
        keys: &[plain(KeyCode::Esc), plain(KeyCode::Backspace)],
        label: "Esc",
        action: Action::Back,
        description: "back out (or close help / clear the filter)",
    },
    Binding {
        keys: &[ch('f')],
        label: "f",
        action: Action::Follow,
        description: "follow: keep the newest session / turn / event selected",
    },
    Binding {
        keys: &[ch(' ')],
        label: "space",
        action: Action::Pause,
        description: "freeze the view while events keep arriving (replay: play/pause)",
    },
    Binding {
        keys: &[ch('r')],
        label: "r",
        action: Action::Replay,
        description: "replay the turn as it happened (again: leave replay)",
    },
    Binding {
        keys: &[ch('s')],
        label: "s",
        action: Action::Speed,
        description: "replay speed: 1× → 10× → max",
    },
    Binding {
        keys: &[ch('['), plain(KeyCode::Left)],
        label: "[, ←",
        action: Action::StepBack,
        description: "one event back (replay and event view)",
    },
    Binding {
        keys: &[ch(']'), plain(KeyCode::Right)],
        label: "], →",
        action: Action::StepForward,
        description: "one event forward (replay and event view)",
    },
    Binding {
        keys: &[ch('{')],
        label: "{",
        action: Action::ScrubBack,
        description: "replay: scrub back a tenth of the turn",
    },
    Binding {
        keys: &[ch('}')],
        label: "}",
        action: Action::ScrubForward,
        description: "replay: scrub forward a tenth of the turn",
    },
    Binding {
        keys: &[ch('/')],
        label: "/",
        action: Action::Filter,
        description: "search: kind:K tool:T status:S or any text (matches lit, n/N)",
    },
    Binding {
        keys: &[ch('&')],
        label: "&",
        action: Action::HideFilter,
        description: "filter: like search, and hide the rows that do not match",
    },
    Binding {
        keys: &[ch('n')],
        label: "n",
        action: Action::NextMatch,
        description: "next match",
    },
    Binding {
        keys: &[ch('N'), Key(KeyCode::Char('N'), KeyModifiers::SHIFT)],
        label: "N",
        action: Action::PrevMatch,
        description: "previous match",
    },
    Binding {
        keys: &[plain(KeyCode::Tab)],
        label: "Tab",
        action: Action::FocusNext,
        description: "turn screen: next pane (timeline, pacing, conversation, tools)",
    },
    Binding {
        keys: &[
            plain(KeyCode::BackTab),
            Key(KeyCode::BackTab, KeyModifiers::SHIFT),
        ],
        label: "shift-Tab",
        action: Action::FocusPrev,
        description: "turn screen: previous pane",
    },
    Binding {
        keys: &[ch('m')],
        label: "m",
        action: Action::Mark,
        description: "mark the selected (or open) turn to compare (again: unmark)",
    },
    Binding {
        keys: &[ch('d')],
        label: "d",
        action: Action::Diff,
        description: "diff the marked turn with the selected one, side by side",
    },
    Binding {
        keys: &[ch('>')],
        label: ">",
        action: Action::SubagentIn,
        description: "timeline: open the sub-agent the selected tool call ran",
    },
    Binding {
        keys: &[ch('<')],
        label: "<",
        action: Action::SubagentOut,
        description: "back from a sub-agent to its parent's tool call (also Esc)",
    },
    Binding {
        keys: &[ch('a')],
        label: "a",
        action: Action::Approve,
        description: "approve the call ▶ waiting for approval (y confirms)",
    },
    Binding {
        keys: &[ch('x')],
        label: "x",
        action: Action::Deny,
        description: "deny the call ▶ waiting for approval (y confirms)",
    },
    Binding {
        keys: &[ch('w')],
        label: "w",
        action: Action::NextApproval,
        description: "select the next call waiting for approval",
    },
    Binding {
        keys: &[ch('?')],
        label: "?",
        action: Action::Help,
        description: "this help",
    },
];

/// The action bound to a key press, if any. Key releases and repeats of non-movement keys are
/// ignored so terminals that report them do not double actions.
pub fn action_for(event: KeyEvent) -> Option<Action> {
    if event.kind == KeyEventKind::Release {
        return None;
    }
    // Shift is implied by an upper-case or symbol character; compare without it.
    let mods = match event.code {
        KeyCode::Char(_) => event.modifiers - KeyModifiers::SHIFT,
        _ => event.modifiers,
    };
    KEYMAP
        .iter()
        .find(|b| {
            b.keys.iter().any(|k| {
                let want = match k.0 {
                    KeyCode::Char(_) => k.1 - KeyModifiers::SHIFT,
                    _ => k.1,
                };
                k.0 == event.code && want == mods
            })
        })
        .map(|b| b.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn keys_map_to_their_actions() {
        assert_eq!(
            action_for(press(KeyCode::Char('q'), KeyModifiers::NONE)),
            Some(Action::Quit)
        );
        assert_eq!(
            action_for(press(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Quit)
        );
        assert_eq!(
            action_for(press(KeyCode::Char('c'), KeyModifiers::NONE)),
            None
        );
        assert_eq!(
            action_for(press(KeyCode::Char('N'), KeyModifiers::SHIFT)),
            Some(Action::PrevMatch)
        );
        assert_eq!(
            action_for(press(KeyCode::Char('G'), KeyModifiers::NONE)),
            Some(Action::Last)
        );
        assert_eq!(
            action_for(press(KeyCode::Left, KeyModifiers::NONE)),
            Some(Action::StepBack)
        );
    }

    #[test]
    fn every_action_has_exactly_one_binding() {
        let mut seen = std::collections::HashSet::new();
        for binding in KEYMAP {
            assert!(
                seen.insert(binding.action),
                "{:?} bound twice",
                binding.action
            );
            assert!(!binding.keys.is_empty());
        }
        assert_eq!(seen.len(), 31);
    }

    #[test]
    fn no_key_is_bound_to_two_actions() {
        for (i, a) in KEYMAP.iter().enumerate() {
            for b in KEYMAP.iter().skip(i + 1) {
                for key in a.keys {
                    assert!(
                        !b.keys.contains(key),
                        "{key:?} is bound to {:?} and {:?}",
                        a.action,
                        b.action
                    );
                }
            }
        }
    }

    #[test]
    fn releases_do_nothing() {
        let mut event = press(KeyCode::Char('q'), KeyModifiers::NONE);
        event.kind = KeyEventKind::Release;
        assert_eq!(action_for(event), None);
    }
}
