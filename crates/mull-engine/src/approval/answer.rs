//! A person's answer to an approval request, as the session's API takes it.

/// A person's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub approved: bool,
    /// For a denial, what the model sees in place of the tool's output (a default sentence
    /// when `None`); for an approval, kept in the log.
    pub reason: Option<String>,
    /// Who answered: the surface the answer came through (`mull dash`, a chat client …),
    /// recorded so the log tells a person's answer from an unattended one.
    pub by: Option<String>,
}

impl Approval {
    /// Run the call.
    pub fn approve() -> Approval {
        Approval {
            approved: true,
            reason: None,
            by: None,
        }
    }

    /// Do not run the call; the model sees `reason` (or a default sentence) as its output.
    pub fn deny(reason: Option<String>) -> Approval {
        Approval {
            approved: false,
            reason,
            by: None,
        }
    }

    /// The same answer, recorded as given by `who`.
    pub fn by(mut self, who: impl Into<String>) -> Approval {
        self.by = Some(who.into());
        self
    }
}
