//! A ticket's input, checked against its flow's input Schema as a revision froze it: the check
//! `afe run` and the API make before a ticket exists, so a ticket never starts on input its flow
//! cannot read.

use serde_json::Value;

/// Why `input` cannot start a ticket of `flow` in the normalized revision `document`: each problem
/// with the place in the input it is at (a JSON pointer). `Err` when the revision has no such flow.
pub fn input_problems(document: &Value, flow: &str, input: &Value) -> Result<Vec<String>, String> {
    let flows = document.get("flows").and_then(Value::as_object);
    let Some(found) = flows.and_then(|f| f.get(flow)) else {
        let known: Vec<&String> = flows.map(|f| f.keys().collect()).unwrap_or_default();
        return Err(format!(
            "the config has no flow {flow:?}; its flows are {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known
                    .iter()
                    .map(|name| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    };
    let schema_name = found
        .get("input")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let schema = document
        .pointer(&format!("/schemas/{schema_name}/schema"))
        .ok_or_else(|| format!("the revision has no Schema {schema_name:?}"))?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the Schema {schema_name:?} does not compile: {e}"))?;
    Ok(validator
        .iter_errors(input)
        .map(|error| {
            let at = error.instance_path().to_string();
            format!("{}: {error}", if at.is_empty() { "the input" } else { &at })
        })
        .collect())
}

/// The ticket's budget in micro-dollars, from its flow's `budget.usd`; none: no limit.
pub fn budget_micros(document: &Value, flow: &str) -> Option<i64> {
    document
        .pointer(&format!("/flows/{flow}/budget/usd"))
        .and_then(Value::as_f64)
        .map(|usd| (usd * 1_000_000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn document() -> Value {
        json!({
            "flows": {"fix": {"input": "req", "budget": {"usd": 1.5}}},
            "schemas": {"req": {"schema": {
                "type": "object",
                "properties": {"repository": {"type": "string", "pattern": "^https?://"}},
                "required": ["repository"],
                "additionalProperties": false
            }}}
        })
    }

    #[test]
    fn an_input_is_checked_against_its_flows_schema_with_places() {
        assert_eq!(
            input_problems(
                &document(),
                "fix",
                &json!({"repository": "https://x/r.git"})
            ),
            Ok(vec![])
        );
        let problems = input_problems(
            &document(),
            "fix",
            &json!({"repository": "ftp://x", "extra": 1}),
        )
        .unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.starts_with("/repository: ")),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.contains("extra")), "{problems:?}");
        let unknown = input_problems(&document(), "nope", &json!({})).unwrap_err();
        assert!(unknown.contains("its flows are fix"), "{unknown}");
        assert_eq!(budget_micros(&document(), "fix"), Some(1_500_000));
    }
}
