//! `application/x-www-form-urlencoded` bodies, as an HTML form posts them.

/// The value of `name` in `body`, decoded (`+` is a space, `%XX` a byte).
pub fn field(body: &str, name: &str) -> Option<String> {
    body.trim_end().split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (decode(key) == name).then(|| decode(value))
    })
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (byte, _) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_and_decoded() {
        let body = "item=green+tea&email=ana%40example.com&bad=%zz";
        assert_eq!(field(body, "item").as_deref(), Some("green tea"));
        assert_eq!(field(body, "email").as_deref(), Some("ana@example.com"));
        assert_eq!(field(body, "bad").as_deref(), Some("%zz"));
        assert_eq!(field(body, "missing"), None);
    }
}
