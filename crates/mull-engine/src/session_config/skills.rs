//! Skills (`configure_session`'s `with_skill`): named instructions the model loads when it needs
//! them, so a long playbook costs prompt tokens only in the turns that use it. The system
//! prompt lists each skill's name and one-line description; the `load_skill` tool (a session
//! tool, second layer of the merge) returns a skill's full instructions. Loading is a tool call
//! like any other, so the log shows which skill a turn loaded and when.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::tool::{Tool, ToolError, ToolExecution, ToolOutput};

/// The name of the tool through which the model loads a skill.
pub const LOAD_SKILL_TOOL: &str = "load_skill";

/// A skill: what the model sees listed (name, description) and what loading it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    /// One line: when the skill helps.
    pub description: String,
    /// The full instructions `load_skill` returns.
    pub instructions: String,
}

impl Skill {
    /// A skill called `name`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        instructions: impl Into<String>,
    ) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            instructions: instructions.into(),
        }
    }
}

/// `system` with the list of skills the model may load appended (unchanged without skills).
pub(crate) fn with_listing(system: String, skills: &[Skill]) -> String {
    if skills.is_empty() {
        return system;
    }
    let mut out = system;
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&format!(
        "Skills you can load with the {LOAD_SKILL_TOOL} tool when one fits the task:"
    ));
    for skill in skills {
        out.push_str(&format!("\n- {}: {}", skill.name, skill.description));
    }
    out
}

/// The `load_skill` tool over `skills`, when there are any.
pub(crate) fn load_skill_tool(skills: &[Skill]) -> Option<Arc<dyn Tool>> {
    (!skills.is_empty()).then(|| {
        Arc::new(LoadSkill {
            skills: skills.to_vec(),
        }) as Arc<dyn Tool>
    })
}

struct LoadSkill {
    skills: Vec<Skill>,
}

#[async_trait]
impl Tool for LoadSkill {
    fn name(&self) -> &str {
        LOAD_SKILL_TOOL
    }
    fn description(&self) -> &str {
        "Loads one of the skills listed in the system prompt: returns its full instructions."
    }
    fn input_schema(&self) -> Arc<Value> {
        let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        Arc::new(json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names}},
            "required": ["name"],
            "additionalProperties": false
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let name = input.get("name").and_then(Value::as_str).unwrap_or("");
        let skill = self
            .skills
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("no skill {name:?}; the system prompt lists the skills"))?;
        Ok(ToolOutput::Value(json!({
            "name": skill.name,
            "instructions": skill.instructions,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_names_each_skill_after_the_prompt() {
        let skills = [
            Skill::new(
                "refunds",
                "Handling a refund request.",
                "1. Check the order.",
            ),
            Skill::new("tone", "Writing to an upset guest.", "Be brief."),
        ];
        assert_eq!(
            with_listing("You are terse.".into(), &skills),
            "You are terse.\n\nSkills you can load with the load_skill tool when one fits the \
             task:\n- refunds: Handling a refund request.\n- tone: Writing to an upset guest."
        );
        assert_eq!(with_listing("Same.".into(), &[]), "Same.");
        assert!(load_skill_tool(&[]).is_none());
    }
}
