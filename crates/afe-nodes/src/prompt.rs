//! An agent's prompt rendered from its node's context: every `{{ name.path }}` replaced by that
//! value of the context (the input under its Schema's name, each completed node's output under its
//! id, `-` written `_`, as `when` reads them) — a string as it is, anything else as JSON. A name the
//! context does not have is an error, never an empty string: a prompt that silently lost its
//! subject would still be paid for.

use serde_json::Value;

/// The prompt with its placeholders filled, or the placeholders the context lacks.
pub fn render(template: &str, context: &Value) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(template.len());
    let mut missing = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            // An opening without its closing is text.
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let path = after[..end].trim();
        match lookup(context, path) {
            Some(Value::String(text)) => out.push_str(text),
            Some(value) => out.push_str(&value.to_string()),
            None => missing.push(path.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// The value at a dotted path (`triage.plan.0`: a key, then an index).
fn lookup<'a>(context: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return None;
    }
    path.split('.').try_fold(context, |value, key| match value {
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        other => other.get(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_take_the_contexts_values() {
        let context = json!({
            "text_request": {"topic": "k8s", "priority": 2},
            "triage": {"plan": ["read", "fix"]}
        });
        assert_eq!(
            render(
                "Fix {{ text_request.topic }} (priority {{text_request.priority}}), first {{ triage.plan.0 }}; plan: {{ triage.plan }}",
                &context
            )
            .unwrap(),
            "Fix k8s (priority 2), first read; plan: [\"read\",\"fix\"]"
        );
        assert_eq!(
            render("no placeholders", &context).unwrap(),
            "no placeholders"
        );
        assert_eq!(
            render("an open {{ brace", &context).unwrap(),
            "an open {{ brace"
        );
        assert_eq!(
            render("{{ nope.x }} and {{ triage.plan.9 }} and {{ }}", &context).unwrap_err(),
            ["nope.x", "triage.plan.9", ""]
        );
    }
}
