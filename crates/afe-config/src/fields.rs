//! A Schema's fields as a JSON Schema: a type name becomes `{type: NAME}`, a fragment stays as
//! written, and the whole is an object that refuses keys it does not list. Tickets' inputs and
//! agents' outputs are checked against it.

use serde_json::{Value, json};

use crate::kinds::{FieldType, SchemaSpec};

/// The type names a field may be written as.
pub const TYPE_NAMES: [&str; 6] = ["string", "integer", "number", "boolean", "object", "array"];

/// One field as a JSON Schema, or why it is not one.
pub fn field_schema(field: &FieldType) -> Result<Value, String> {
    let schema = match field {
        FieldType::Name(name) if TYPE_NAMES.contains(&name.as_str()) => json!({"type": name}),
        FieldType::Name(name) => {
            let closest = TYPE_NAMES
                .iter()
                .min_by_key(|t| strsim::levenshtein(t, name))
                .copied()
                .unwrap_or("string");
            return Err(format!(
                "{name:?} is not a type name (did you mean {closest:?}? The names are {})",
                TYPE_NAMES.join(", ")
            ));
        }
        FieldType::Fragment(fragment) => Value::Object(fragment.clone()),
    };
    jsonschema::meta::validate(&schema).map_err(|err| format!("not a JSON Schema: {err}"))?;
    jsonschema::validator_for(&schema).map_err(|err| format!("not a JSON Schema: {err}"))?;
    Ok(schema)
}

/// The whole Schema as one JSON Schema. Call only on a Schema whose fields all passed
/// [`field_schema`]; a field that did not is left open (`{}`).
pub fn object_schema(spec: &SchemaSpec) -> Value {
    let properties: serde_json::Map<String, Value> = spec
        .fields
        .iter()
        .map(|(name, field)| (name.clone(), field_schema(field).unwrap_or(json!({}))))
        .collect();
    let required: Vec<&String> = spec
        .fields
        .keys()
        .filter(|name| !spec.optional.contains(name))
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(value: Value) -> FieldType {
        FieldType::Fragment(value.as_object().unwrap().clone())
    }

    #[test]
    fn names_and_fragments() {
        assert_eq!(
            field_schema(&FieldType::Name("string".into())).unwrap(),
            json!({"type": "string"})
        );
        assert!(
            field_schema(&FieldType::Name("strng".into()))
                .unwrap_err()
                .contains("\"string\"")
        );
        assert!(field_schema(&fragment(json!({"type": "integer", "minimum": 1}))).is_ok());
        assert!(field_schema(&fragment(json!({"type": "integr"}))).is_err());
        assert!(field_schema(&fragment(json!({"minimum": "one"}))).is_err());
    }

    #[test]
    fn the_object_requires_all_but_the_optional_fields_and_refuses_others() {
        let spec = SchemaSpec {
            fields: [
                ("topic".to_string(), FieldType::Name("string".into())),
                ("note".to_string(), FieldType::Name("string".into())),
            ]
            .into(),
            optional: vec!["note".into()],
        };
        let validator = jsonschema::validator_for(&object_schema(&spec)).unwrap();
        assert!(validator.is_valid(&json!({"topic": "k8s"})));
        assert!(!validator.is_valid(&json!({"note": "x"})));
        assert!(!validator.is_valid(&json!({"topic": "k8s", "extra": 1})));
    }
}
