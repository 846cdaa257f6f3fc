//! Starting a ticket from a form generated from its flow's input Schema. The form's fields come
//! from the Schema's properties (a text box, a number, a checkbox, a choice, or JSON for what has
//! no simpler control); the API checks the input as it checks any client's. A flow with nodes
//! that call a model asks for a confirmation: starting it spends money.

use std::collections::BTreeMap;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::Ui;
use crate::layout::{page, refusal};
use crate::session::{Person, allowed};

/// What a form field asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Text,
    Integer,
    Number,
    Boolean,
    Choice(Vec<String>),
    /// Anything else (objects, arrays, unions): typed as JSON.
    Json,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub kind: Kind,
    pub required: bool,
    pub description: Option<String>,
}

/// The fields of an object Schema, in its properties' order.
pub fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let kind = if let Some(choices) = property["enum"].as_array() {
                if choices.iter().all(Value::is_string) {
                    Kind::Choice(
                        choices
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect(),
                    )
                } else {
                    Kind::Json
                }
            } else {
                match property["type"].as_str() {
                    Some("string") => Kind::Text,
                    Some("integer") => Kind::Integer,
                    Some("number") => Kind::Number,
                    Some("boolean") => Kind::Boolean,
                    _ => Kind::Json,
                }
            };
            Field {
                name: name.clone(),
                kind,
                required: required.contains(&name.as_str()),
                description: property["description"].as_str().map(str::to_string),
            }
        })
        .collect()
}

/// The form's name for a field (prefixed, so a field cannot shadow `csrf` or `flow`).
fn control(name: &str) -> String {
    format!("in.{name}")
}

/// The input a submitted form gives, or what is wrong with it (each field's problem).
pub fn input(fields: &[Field], form: &BTreeMap<String, String>) -> Result<Value, Vec<String>> {
    let mut input = Map::new();
    let mut problems = Vec::new();
    for field in fields {
        let raw = form.get(&control(&field.name)).map(|v| v.trim());
        let value = match (&field.kind, raw) {
            (Kind::Boolean, raw) => Some(Value::Bool(raw.is_some())),
            (_, None) | (_, Some("")) => None,
            (Kind::Text, Some(text)) => Some(Value::String(text.to_string())),
            (Kind::Choice(_), Some(text)) => Some(Value::String(text.to_string())),
            (Kind::Integer, Some(text)) => match text.parse::<i64>() {
                Ok(n) => Some(json!(n)),
                Err(_) => {
                    problems.push(format!("{}: {text:?} is not a whole number", field.name));
                    None
                }
            },
            (Kind::Number, Some(text)) => match text.parse::<f64>() {
                Ok(n) if n.is_finite() => Some(json!(n)),
                _ => {
                    problems.push(format!("{}: {text:?} is not a number", field.name));
                    None
                }
            },
            (Kind::Json, Some(text)) => match serde_json::from_str::<Value>(text) {
                Ok(value) => Some(value),
                Err(err) => {
                    problems.push(format!("{}: not JSON: {err}", field.name));
                    None
                }
            },
        };
        if let Some(value) = value {
            input.insert(field.name.clone(), value);
        }
    }
    if problems.is_empty() {
        Ok(Value::Object(input))
    } else {
        Err(problems)
    }
}

/// Whether a flow has nodes that call a model (and so cost money).
fn paid(flow: &Value) -> bool {
    flow["nodes"].as_array().is_some_and(|nodes| {
        nodes
            .iter()
            .any(|n| n.get("agent").is_some() || n.get("deep").is_some() || n.get("acp").is_some())
    })
}

fn form(flow: &str, document: &Value, csrf: &str, values: &BTreeMap<String, String>) -> Markup {
    let found = &document["flows"][flow];
    let schema_name = found["input"].as_str().unwrap_or("");
    let schema = &document["schemas"][schema_name]["schema"];
    let value = |name: &str| values.get(&control(name)).cloned().unwrap_or_default();
    html! {
        form method="post" action="/ui/start" class="start" {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="flow" value=(flow);
            @for field in fields(schema) {
                @let id = control(&field.name);
                div class="field" {
                    @match &field.kind {
                        Kind::Boolean => {
                            label class="confirm" for=(id) {
                                input id=(id) type="checkbox" name=(id) checked[values.contains_key(&id)];
                                " " (field.name)
                            }
                        }
                        Kind::Choice(choices) => {
                            label for=(id) { (field.name) @if field.required { " (required)" } }
                            select id=(id) name=(id) required[field.required] {
                                @if !field.required { option value="" { "—" } }
                                @for choice in choices {
                                    option value=(choice) selected[value(&field.name) == *choice] { (choice) }
                                }
                            }
                        }
                        Kind::Json => {
                            label for=(id) { (field.name) " (JSON)" @if field.required { " (required)" } }
                            textarea id=(id) name=(id) rows="4" required[field.required] { (value(&field.name)) }
                        }
                        kind => {
                            label for=(id) { (field.name) @if field.required { " (required)" } }
                            input id=(id) name=(id) value=(value(&field.name)) required[field.required]
                                type=(if matches!(kind, Kind::Text) { "text" } else { "number" })
                                step=[match kind { Kind::Number => Some("any"), Kind::Integer => Some("1"), _ => None }];
                        }
                    }
                    @if let Some(description) = &field.description { p class="meta" { (description) } }
                }
            }
            @if paid(found) {
                label class="confirm" {
                    input type="checkbox" name="confirm" value="yes" required;
                    " I understand this flow calls models, and its calls are paid"
                }
            }
            button type="submit" { "Start" }
        }
    }
}

/// The current revision with its document, or the page saying why the API would not give it.
async fn current(ui: &Ui, person: &Person) -> Result<Value, Response> {
    ui.api
        .get("/v1/revisions/current", &person.token)
        .await
        .map_err(|refused| {
            (
                refused.status,
                page("Start a ticket", Some(&person.csrf), refusal(&refused)),
            )
                .into_response()
        })
}

#[derive(Debug, Default, Deserialize)]
pub struct Which {
    #[serde(default)]
    flow: Option<String>,
}

pub async fn view(State(ui): State<Ui>, person: Person, Query(which): Query<Which>) -> Response {
    let current = match current(&ui, &person).await {
        Ok(current) => current,
        Err(refused) => return refused,
    };
    let document = &current["document"];
    let flows: Vec<String> = document["flows"]
        .as_object()
        .map(|f| f.keys().cloned().collect())
        .unwrap_or_default();
    let body = match which.flow.filter(|f| flows.contains(f)) {
        Some(flow) => html! {
            p { "Flow " strong { (flow) } ", revision " code { (current["hash"].as_str().unwrap_or("").get(..12).unwrap_or("")) } }
            (form(&flow, document, &person.csrf, &BTreeMap::new()))
        },
        None => html! {
            p { "Which flow?" }
            ul { @for flow in &flows { li { a href={ "/ui/start?flow=" (flow) } { (flow) } } } }
        },
    };
    page("Start a ticket", Some(&person.csrf), body).into_response()
}

pub async fn submit(
    State(ui): State<Ui>,
    person: Person,
    headers: HeaderMap,
    Form(values): Form<BTreeMap<String, String>>,
) -> Response {
    let csrf = values.get("csrf").cloned().unwrap_or_default();
    if !allowed(&person, &csrf, &headers) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let flow = values.get("flow").cloned().unwrap_or_default();
    let current = match current(&ui, &person).await {
        Ok(current) => current,
        Err(refused) => return refused,
    };
    let document = &current["document"];
    let found = &document["flows"][&flow];
    let schema = &document["schemas"][found["input"].as_str().unwrap_or("")]["schema"];
    let again = |status: StatusCode, problem: Markup| {
        (
            status,
            page(
                "Start a ticket",
                Some(&person.csrf),
                html! {
                    (problem)
                    (form(&flow, document, &person.csrf, &values))
                },
            ),
        )
            .into_response()
    };
    if paid(found) && values.get("confirm").map(String::as_str) != Some("yes") {
        return again(
            StatusCode::BAD_REQUEST,
            html! {
                div class="problem" role="alert" { p { "This flow calls models: tick the confirmation to start it." } }
            },
        );
    }
    let input = match input(&fields(schema), &values) {
        Ok(input) => input,
        Err(problems) => {
            return again(
                StatusCode::UNPROCESSABLE_ENTITY,
                html! {
                    div class="problem" role="alert" { ul { @for p in &problems { li { (p) } } } }
                },
            );
        }
    };
    let started = ui
        .api
        .call(
            Method::POST,
            "/v1/tickets",
            &person.token,
            Some(json!({"flow": flow, "input": input})),
        )
        .await;
    match started {
        Ok(ticket) => Redirect::to(&format!(
            "/ui/tickets/{}",
            ticket["id"].as_str().unwrap_or("")
        ))
        .into_response(),
        Err(refused) => {
            let problems: Vec<String> = refused.problem["problems"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            again(
                refused.status,
                html! {
                    (refusal(&refused))
                    @if !problems.is_empty() { ul class="problem" { @for p in &problems { li { (p) } } } }
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_the_schema_and_the_form_gives_typed_input() {
        let schema = json!({
            "type": "object",
            "properties": {
                "topic": {"type": "string", "description": "What to do"},
                "priority": {"type": "integer"},
                "urgent": {"type": "boolean"},
                "size": {"enum": ["s", "m"]},
                "tags": {"type": "array"},
            },
            "required": ["topic"],
        });
        let found = fields(&schema);
        let kinds: Vec<(&str, &Kind, bool)> = found
            .iter()
            .map(|f| (f.name.as_str(), &f.kind, f.required))
            .collect();
        assert_eq!(kinds.len(), 5);
        assert!(kinds.contains(&("topic", &Kind::Text, true)));
        assert!(kinds.contains(&("size", &Kind::Choice(vec!["s".into(), "m".into()]), false)));
        assert!(kinds.contains(&("tags", &Kind::Json, false)));
        let form: BTreeMap<String, String> = [
            ("in.topic", "fix it"),
            ("in.priority", "3"),
            ("in.urgent", "on"),
            ("in.size", "m"),
            ("in.tags", r#"["a"]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            input(&found, &form).unwrap(),
            json!({"topic": "fix it", "priority": 3, "urgent": true, "size": "m", "tags": ["a"]})
        );
        let mut wrong = form.clone();
        wrong.insert("in.priority".into(), "three".into());
        wrong.insert("in.tags".into(), "[".into());
        let problems = input(&found, &wrong).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        // Left empty: absent (the API says whether that is allowed); unchecked: false.
        let empty: BTreeMap<String, String> = BTreeMap::new();
        assert_eq!(input(&found, &empty).unwrap(), json!({"urgent": false}));
    }
}
