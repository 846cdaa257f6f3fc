//! Name rules: object names and node ids are DNS-1123 labels (Kubernetes refuses any other object
//! name); environment variable names are POSIX shell names.

/// The longest DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63;

/// Why `name` is not a DNS-1123 label, or `None` when it is one.
pub fn label_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_string());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "it is {} characters long; the limit is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!(
            "it contains {bad:?}; only lowercase letters, digits and '-' are allowed"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("it starts or ends with '-'".to_string());
    }
    None
}

/// `name` as a DNS-1123 label would be written: lowercased, other characters turned into '-'.
pub fn suggested_label(name: &str) -> String {
    let lowered: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = lowered.trim_matches('-');
    trimmed.chars().take(MAX_NAME_LEN).collect()
}

/// Whether `name` is an environment variable name: a letter or `_`, then letters, digits, `_` —
/// one rule for af's manifests and afe's configs.
pub use af_manifest::is_env_name;

/// How a name is written as a CEL variable: `-` cannot be in an identifier (`text-request.topic`
/// would be read as a subtraction), so it becomes `_`.
pub fn cel_variable(name: &str) -> String {
    name.replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for good in ["a", "text-request", "fix-42", &"a".repeat(63)] {
            assert_eq!(label_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "Text",
            "text_request",
            "-a",
            "a-",
            "a.b",
            &"a".repeat(64),
        ] {
            assert!(label_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(suggested_label("Text_Request"), "text-request");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("OPENROUTER_API_KEY"));
        assert!(is_env_name("_x1"));
        assert!(!is_env_name("1X"));
        assert!(!is_env_name("A-B"));
        assert!(!is_env_name(""));
    }
}
