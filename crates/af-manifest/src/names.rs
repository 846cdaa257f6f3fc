//! Name rules. Service and manifest names become Kubernetes object names, DNS labels and parts of
//! namespace names, so they are held to the strictest of those rules here, where a person can still
//! rename them, rather than failing later on a cluster.

/// Why `name` is not a DNS-1123 label that can also name a Kubernetes Service, or `None` if it is.
///
/// Kubernetes Service names are DNS-1035 labels (they must start with a letter), so a name that
/// starts with a digit is refused even though DNS-1123 alone would allow it.
pub fn label_problem(name: &str, max_len: usize) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_string());
    }
    if name.len() > max_len {
        return Some(format!(
            "it is {} characters long; at most {max_len} fit",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(if c.is_ascii_uppercase() {
            "it has upper-case letters".to_string()
        } else {
            format!("it contains {c:?}; only a-z, 0-9 and '-' are allowed")
        });
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Some("it must start with a letter".to_string());
    }
    if name.ends_with('-') {
        return Some("it must not end with '-'".to_string());
    }
    None
}

/// A suggested spelling that passes [`label_problem`]: lower case, other characters turned into '-'.
pub fn suggest_label(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-');
    if out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.to_string()
    } else {
        format!("s-{out}").trim_end_matches('-').to_string()
    }
}

/// Whether `name` can be an environment variable name (POSIX: letters, digits, '_', not starting
/// with a digit).
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why `name` is not a DNS name (lower-case labels of at most 63 characters, at most 253 in all),
/// or `None` if it is.
pub fn dns_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_string());
    }
    if name.len() > 253 {
        return Some(format!(
            "it is {} characters long; at most 253 fit",
            name.len()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some("it has an empty label (two dots in a row, or a leading dot)".to_string());
        }
        if label.len() > 63 {
            return Some(format!("the label {label:?} is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Some(format!(
                "it contains {c:?}; only a-z, 0-9, '-' and '.' are allowed"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!("the label {label:?} starts or ends with '-'"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(label_problem("web", 63), None);
        assert_eq!(label_problem("web-2", 63), None);
        assert!(label_problem("", 63).is_some());
        assert!(label_problem("Web", 63).unwrap().contains("upper-case"));
        assert!(label_problem("web_api", 63).unwrap().contains("'_'"));
        assert!(
            label_problem("2web", 63)
                .unwrap()
                .contains("start with a letter")
        );
        assert!(label_problem("-web", 63).is_some());
        assert!(label_problem("web-", 63).unwrap().contains("end with"));
        assert!(
            label_problem(&"a".repeat(64), 63)
                .unwrap()
                .contains("64 characters")
        );
        assert_eq!(label_problem(&"a".repeat(63), 63), None);
    }

    #[test]
    fn suggestions_pass_the_rule() {
        for bad in ["Web_API", "2web", "web-", "__", "Ä"] {
            let suggestion = suggest_label(bad);
            assert_eq!(
                label_problem(&suggestion, 63),
                None,
                "{bad} -> {suggestion}"
            );
        }
        assert_eq!(suggest_label("Web_API"), "web-api");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("DATABASE_URL"));
        assert!(is_env_name("_x1"));
        assert!(!is_env_name("1X"));
        assert!(!is_env_name("A-B"));
        assert!(!is_env_name(""));
    }

    #[test]
    fn dns_names() {
        assert_eq!(dns_name_problem("preview.example.com"), None);
        assert!(dns_name_problem("a..b").is_some());
        assert!(dns_name_problem("-a.b").is_some());
        assert!(dns_name_problem("a_b.c").is_some());
        assert!(dns_name_problem(&format!("{}.com", "a".repeat(64))).is_some());
    }
}
