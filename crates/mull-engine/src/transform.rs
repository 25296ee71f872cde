//! Stream transforms: functions over stream parts that rewrite what the user sees (and what is
//! persisted), applied in order. The log keeps the original part beside a changed one.

use std::sync::Arc;

use mull_core::StreamPart;

/// A named rewrite of stream parts.
#[derive(Clone)]
pub struct StreamTransform {
    name: String,
    map: Arc<dyn Fn(StreamPart) -> StreamPart + Send + Sync>,
}

impl StreamTransform {
    /// A transform; `name` is what `turn_configured` records.
    pub fn new(
        name: impl Into<String>,
        map: impl Fn(StreamPart) -> StreamPart + Send + Sync + 'static,
    ) -> StreamTransform {
        StreamTransform {
            name: name.into(),
            map: Arc::new(map),
        }
    }

    /// The transform's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Rewrites one part.
    pub fn apply(&self, part: StreamPart) -> StreamPart {
        (self.map)(part)
    }
}

impl std::fmt::Debug for StreamTransform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Applies `transforms` in order; returns the final part and, when it differs, the original.
pub fn apply_all(
    transforms: &[StreamTransform],
    part: StreamPart,
) -> (StreamPart, Option<StreamPart>) {
    if transforms.is_empty() {
        return (part, None);
    }
    let original = part.clone();
    let out = transforms.iter().fold(part, |p, t| t.apply(p));
    if out == original {
        (out, None)
    } else {
        (out, Some(original))
    }
}
