//! Recognizing secrets written where a reference belongs. A manifest is committed, copied into
//! tickets and printed in logs; a secret in it has leaked the moment it is written down.

/// Name segments that mark a variable as holding a secret.
const SECRET_SEGMENTS: [&str; 8] = [
    "PASSWORD",
    "PASSWD",
    "SECRET",
    "TOKEN",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "PRIVATEKEY",
];

/// Two-segment endings that mark a key as secret (`STRIPE_API_KEY`, `AWS_SECRET_ACCESS_KEY`).
const SECRET_PAIRS: [(&str, &str); 4] = [
    ("API", "KEY"),
    ("PRIVATE", "KEY"),
    ("ACCESS", "KEY"),
    ("SIGNING", "KEY"),
];

/// Whether an environment variable of this name holds a secret, judged by how its `_`-separated
/// name ends: `DB_PASSWORD`, `GITHUB_TOKEN` and `STRIPE_API_KEY` do; `TOKEN_TTL` (a duration) and
/// `KEYBOARD_LAYOUT` do not.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let segments: Vec<&str> = upper.split('_').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [.., before, last] => {
            SECRET_SEGMENTS.contains(last) || SECRET_PAIRS.contains(&(*before, *last))
        }
        [last] => SECRET_SEGMENTS.contains(last),
        [] => false,
    }
}

/// Whether a value carries a password inside a URL (`postgres://user:pw@host/db`).
pub fn has_url_password(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => userinfo
            .split_once(':')
            .is_some_and(|(_, password)| !password.is_empty()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for name in [
            "DB_PASSWORD",
            "GITHUB_TOKEN",
            "STRIPE_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "client_secret",
            "TOKEN",
            "SMTP_PASSWD",
            "OPENAI_APIKEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "KEYBOARD_LAYOUT",
            "PORT",
            "LOG_LEVEL",
            "DATABASE_URL",
            "TOKENIZER",
            "KEY",
            "TOKEN_TTL",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn url_passwords() {
        assert!(has_url_password("postgres://app:hunter2@db:5432/app"));
        assert!(has_url_password("redis://:pw@cache:6379"));
        assert!(!has_url_password("postgres://app@db:5432/app"));
        assert!(!has_url_password("http://example.com/a:b@c"));
        assert!(!has_url_password("user:pw@host"));
    }
}
