//! One way to print results: an aligned table, or JSON lines.

use serde::Serialize;

/// One measured number.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub bench: &'static str,
    pub metric: String,
    pub value: f64,
    pub unit: &'static str,
    /// The goal, as text (`>= 70 %`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Whether the goal is met, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
    /// What exactly was measured.
    pub note: String,
}

/// Prints `results` as a table or as JSON lines.
pub fn print(results: &[Measurement], json: bool) -> anyhow::Result<()> {
    if json {
        for result in results {
            println!("{}", serde_json::to_string(result)?);
        }
        return Ok(());
    }
    println!(
        "{:<6} {:<28} {:>14} {:<10} {:<14} note",
        "bench", "metric", "value", "unit", "goal"
    );
    for r in results {
        let goal = match (&r.goal, r.met) {
            (Some(goal), Some(true)) => format!("{goal} ok"),
            (Some(goal), _) => format!("{goal} MISSED"),
            (None, _) => String::new(),
        };
        println!(
            "{:<6} {:<28} {:>14} {:<10} {:<14} {}",
            r.bench,
            r.metric,
            format_value(r.value),
            r.unit,
            goal,
            r.note
        );
    }
    Ok(())
}

fn format_value(value: f64) -> String {
    if value >= 1000.0 {
        let whole = value.round() as u64;
        let digits = whole.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{value:.2}")
    }
}
