//! A person's answer to an approval request, as the session's API takes it.

/// A person's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub approved: bool,
    /// For a denial, what the model sees in place of the tool's output (a default sentence
    /// when `None`); for an approval, kept in the log.
    pub reason: Option<String>,
}

impl Approval {
    /// Run the call.
    pub fn approve() -> Approval {
        Approval {
            approved: true,
            reason: None,
        }
    }

    /// Do not run the call; the model sees `reason` (or a default sentence) as its output.
    pub fn deny(reason: Option<String>) -> Approval {
        Approval {
            approved: false,
            reason,
        }
    }
}
