//! The control API's bearer token.

/// A control token nobody can guess: 32 hex digits from the kernel's random source. Each runtime
/// makes one per environment (an afe worker one per ticket) and puts it in the sidecar's
/// configuration.
pub fn new_control_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_32_hex_digits_and_never_repeat() {
        let one = super::new_control_token().unwrap();
        let two = super::new_control_token().unwrap();
        assert_eq!(one.len(), 32);
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one, two);
    }
}
