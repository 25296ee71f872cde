//! Checking a tool call's input against its tool's JSON Schema.
//!
//! Compiling a schema costs far more than checking an input (hundreds of times a small input's
//! check), and the first compile of a schema dialect in a process also builds that dialect's
//! meta-schema, about a millisecond. So validators are kept by the schema's content, and a schema
//! derived from a Rust type is compiled ahead, on a thread of its own, as soon as it is first
//! derived: a tool's first call, which comes only after the model has streamed its step, then
//! finds its validator ready instead of compiling it on the turn's path.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::Value;

/// How many compiled schemas are kept; the oldest is dropped past it.
const COMPILED_SCHEMAS: usize = 256;

/// Checks `input` against `schema`; the error lists every violation with its location.
pub fn validate_input(tool_name: &str, schema: &Value, input: &Value) -> Result<(), String> {
    let validator = compiled(schema)
        .map_err(|e| format!("tool {tool_name:?} has an invalid input schema: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(input)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{e} (at {at})")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Invalid input for tool {tool_name:?}: {}",
            problems.join("; ")
        ))
    }
}

/// Compiles `schema` on a thread of its own and keeps its validator, so the first call that
/// checks an input against it need not compile it. Should the thread not start, or the schema
/// not compile, nothing is kept and the first check compiles it (and reports its error).
pub(crate) fn compile_ahead(schema: Arc<Value>) {
    let spawned = std::thread::Builder::new()
        .name("mull-tool-schema".to_owned())
        .spawn(move || {
            let _ = compiled(&schema);
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "compiling a tool schema ahead: no thread; compiled on first use");
    }
}

type Kept = Vec<(Value, Arc<jsonschema::Validator>)>;

fn kept() -> MutexGuard<'static, Kept> {
    static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The kept validator of a schema with this content, if any. Kept by content, not allocation,
/// since agents commonly build their tools (and schemas) afresh for every turn.
fn find(schema: &Value) -> Option<Arc<jsonschema::Validator>> {
    kept()
        .iter()
        .find(|(s, _)| s == schema)
        .map(|(_, v)| Arc::clone(v))
}

/// The validator of `schema`, compiled once and kept. Compiled outside the lock: a check of
/// another schema never waits for a compile. Two compiles of one schema racing keep the first.
fn compiled(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    if let Some(validator) = find(schema) {
        return Ok(validator);
    }
    let validator = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
    let mut kept = kept();
    if let Some((_, first)) = kept.iter().find(|(s, _)| s == schema) {
        return Ok(Arc::clone(first));
    }
    if kept.len() >= COMPILED_SCHEMAS {
        kept.remove(0);
    }
    kept.push((schema.clone(), Arc::clone(&validator)));
    Ok(validator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::schema_of;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;
    use std::time::{Duration, Instant};

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Lookup {
        query: String,
        limit: Option<u32>,
    }

    #[test]
    fn derived_schemas_validate_inputs() {
        let schema = schema_of::<Lookup>();
        assert!(validate_input("lookup", &schema, &json!({"query": "rust"})).is_ok());
        let err = validate_input("lookup", &schema, &json!({"limit": "x"})).unwrap_err();
        assert!(err.contains("query"), "{err}");
        assert!(err.contains("lookup"), "{err}");
    }

    #[test]
    fn a_kept_validator_serves_only_the_schema_it_was_compiled_from() {
        let at_least = |n: i64| json!({"type": "object", "properties": {"n": {"minimum": n}}});
        let input = json!({"n": 5});
        for _ in 0..2 {
            assert!(validate_input("t", &at_least(1), &input).is_ok());
            let err = validate_input("t", &at_least(10), &input).unwrap_err();
            assert!(err.contains("10"), "{err}");
        }
        let err = validate_input("t", &json!({"type": 7}), &input).unwrap_err();
        assert!(err.contains("invalid input schema"), "{err}");
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Booking {
        hotel: String,
        nights: u8,
    }

    #[test]
    fn a_derived_schema_is_compiled_ahead_before_any_input_is_checked() {
        let schema = schema_of::<Booking>();
        let deadline = Instant::now() + Duration::from_secs(30);
        while find(&schema).is_none() {
            assert!(
                Instant::now() < deadline,
                "no validator was compiled ahead for a freshly derived schema"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let err =
            validate_input("book", &schema, &json!({"hotel": "H", "nights": 300})).unwrap_err();
        assert!(err.contains("nights"), "{err}");
    }
}
