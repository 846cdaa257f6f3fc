//! Kubernetes quantities as the node needs them: CPU in millicores, memory in bytes (`250m`,
//! `0.5`, `2`; `128Mi`, `1G`, `64e6`).

/// Millicores of a CPU quantity.
pub fn cpu_millis(text: &str) -> Option<u64> {
    if let Some(millis) = text.strip_suffix('m') {
        return millis.parse().ok();
    }
    let cores: f64 = text.parse().ok()?;
    (cores >= 0.0).then(|| (cores * 1000.0).ceil() as u64)
}

/// Bytes of a memory quantity.
pub fn bytes(text: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            let value: f64 = number.parse().ok()?;
            return Some((value * factor as f64).ceil() as u64);
        }
    }
    if let Some(millis) = text.strip_suffix('m') {
        return millis.parse::<u64>().ok().map(|m| m.div_ceil(1000));
    }
    let value: f64 = text.parse().ok()?;
    (value >= 0.0).then(|| value.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_writes_them() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(cpu_millis("lots"), None);
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("64e6"), Some(64_000_000));
        assert_eq!(bytes("1024"), Some(1024));
    }
}
