//! Kubernetes resource quantities (`250m`, `0.5`, `128Mi`, `1e3`), parsed exactly as the API
//! server reads them, so that a figure accepted here is accepted by a cluster and means the same.

use std::fmt;

use serde::Serialize;

/// A positive resource quantity, kept as written and as an exact number of thousandths (millicores
/// for CPU, thousandths of a byte for memory), rounded up as Kubernetes rounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Quantity {
    text: String,
    milli: u128,
}

impl Quantity {
    /// The quantity as written in the manifest (which Kubernetes accepts unchanged).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value in thousandths of the unit: millicores for CPU.
    pub fn milli_value(&self) -> u128 {
        self.milli
    }

    /// The value in whole units, rounded up: bytes for memory, cores for CPU.
    pub fn value_rounded_up(&self) -> u128 {
        self.milli.div_ceil(1000)
    }

    /// The quantity as the API server writes it back (apimachinery's canonical form): the same
    /// kind of suffix as written, the largest one that keeps the number whole (`0.5` → `500m`,
    /// `1000m` → `1`, `1.5Gi` → `1536Mi`, `2048Ki` → `2Mi`), and a binary figure below 1024 or with
    /// a fraction of a byte in decimal. Sending this form is what lets a second `up` see the
    /// object as already applied.
    pub fn canonical(&self) -> String {
        let binary = self.text.ends_with('i');
        let exponent_form = self
            .text
            .trim_start_matches(['+', '-'])
            .contains(['e', 'E']);
        if binary && self.milli.is_multiple_of(1000) && self.milli >= 1_024_000 {
            let mut value = self.milli / 1000;
            let mut power = 0;
            while value.is_multiple_of(1024) && power < 6 {
                value /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return format!("{value}{suffix}");
        }
        // Decimal: the value is `milli` thousandths; the largest power of 1000 that divides it.
        let mut value = self.milli;
        let mut power = 0;
        while value.is_multiple_of(1000) && power < 7 {
            value /= 1000;
            power += 1;
        }
        if exponent_form {
            let exponent = 3 * power as i64 - 3;
            return match exponent {
                0 => value.to_string(),
                e => format!("{value}e{e}"),
            };
        }
        let suffix = ["m", "", "k", "M", "G", "T", "P", "E"][power];
        format!("{value}{suffix}")
    }

    /// Whether the quantity uses a suffix below one unit (`m`, `u`, `n`), which for memory means a
    /// fraction of a byte: almost always `Mi` meant and mistyped.
    pub fn has_sub_unit_suffix(&self) -> bool {
        self.text.ends_with(['m', 'u', 'n'])
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Why a text is not a usable quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// Not the Kubernetes quantity grammar at all.
    Malformed(String),
    /// A quantity, but zero or negative: a request for nothing.
    NotPositive,
    /// A quantity too large for any machine.
    TooLarge,
}

/// Parses `<sign><number><suffix>` where the suffix is binary (`Ki`..`Ei`), decimal (`n u m k M G T
/// P E` or none) or a decimal exponent (`e3`, `E-2`).
pub fn parse_quantity(text: &str) -> Result<Quantity, QuantityError> {
    let malformed = |why: &str| Err(QuantityError::Malformed(why.to_string()));
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return malformed("it does not start with a number");
    }
    if fraction.contains('.') {
        return malformed("it has more than one decimal point");
    }
    // Scale as a power of ten and a power of 1024, applied to the digits read as one integer.
    let (ten_power, binary_power): (i64, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        s if s.starts_with(['e', 'E']) => match parse_exponent(&s[1..]) {
            Some(e) => (e, 0),
            None => return malformed("the exponent after 'e' is not a whole number"),
        },
        s => {
            return Err(QuantityError::Malformed(format!(
                "{s:?} is not a unit; use m for thousandths, k/M/G for powers of ten or Ki/Mi/Gi for powers of 1024"
            )));
        }
    };
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Err(QuantityError::NotPositive);
    }
    if negative {
        return Err(QuantityError::NotPositive);
    }
    if digits.len() > 30 {
        return Err(QuantityError::TooLarge);
    }
    let mantissa: u128 = digits.parse().map_err(|_| QuantityError::TooLarge)?;
    // milli = mantissa * 1024^b * 10^(ten_power + 3 - fraction digits), rounded up.
    let exponent =
        ten_power + 3 - i64::try_from(fraction.len()).map_err(|_| QuantityError::TooLarge)?;
    let scaled = mantissa
        .checked_mul(
            1024u128
                .checked_pow(binary_power)
                .ok_or(QuantityError::TooLarge)?,
        )
        .ok_or(QuantityError::TooLarge)?;
    let milli = if exponent >= 0 {
        let power = u32::try_from(exponent).map_err(|_| QuantityError::TooLarge)?;
        scaled
            .checked_mul(10u128.checked_pow(power).ok_or(QuantityError::TooLarge)?)
            .ok_or(QuantityError::TooLarge)?
    } else {
        let power = u32::try_from(-exponent).map_err(|_| QuantityError::TooLarge)?;
        match 10u128.checked_pow(power) {
            Some(divisor) => scaled.div_ceil(divisor),
            // Smaller than any representable thousandth, but not zero: Kubernetes rounds it up.
            None => 1,
        }
    };
    Ok(Quantity {
        text: text.to_string(),
        milli,
    })
}

fn parse_exponent(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(text: &str) -> u128 {
        parse_quantity(text).unwrap().milli_value()
    }

    #[test]
    fn decimal_and_binary_suffixes() {
        assert_eq!(milli("250m"), 250);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli("2"), 2000);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("1."), 1000);
        assert_eq!(milli("+1"), 1000);
        assert_eq!(milli("1k"), 1_000_000);
        assert_eq!(milli("128Mi"), 128 * 1024 * 1024 * 1000);
        assert_eq!(milli("1.5Gi"), 1_610_612_736_000);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E-3"), 1);
        assert_eq!(milli("500u"), 1, "0.5 milli rounds up");
        assert_eq!(milli("1n"), 1);
    }

    #[test]
    fn whole_units_round_up() {
        assert_eq!(parse_quantity("1500m").unwrap().value_rounded_up(), 2);
        assert_eq!(parse_quantity("1Ki").unwrap().value_rounded_up(), 1024);
    }

    #[test]
    fn zero_and_negative_are_requests_for_nothing() {
        for text in ["0", "0m", "0.0", "0Gi", "-1", "-250m", "000"] {
            assert_eq!(
                parse_quantity(text),
                Err(QuantityError::NotPositive),
                "{text}"
            );
        }
    }

    #[test]
    fn malformed() {
        for text in [
            "", "abc", "1.2.3", "1 Gi", "1gb", "1GB", "Mi", "1e", "1e1.5", "1ki", ".",
        ] {
            assert!(
                matches!(parse_quantity(text), Err(QuantityError::Malformed(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn too_large() {
        assert_eq!(parse_quantity("1e999"), Err(QuantityError::TooLarge));
        assert!(matches!(
            parse_quantity("1e9999"),
            Err(QuantityError::Malformed(_))
        ));
        assert_eq!(
            parse_quantity("99999999999999999999999999999999Ei"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(parse_quantity("1e200"), Err(QuantityError::TooLarge));
    }

    #[test]
    fn canonical_forms_are_the_api_servers() {
        // Each pair as a Kubernetes API server returns the first when sent it.
        for (sent, returned) in [
            ("250m", "250m"),
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("2", "2"),
            ("1000", "1k"),
            ("1024", "1024"),
            ("128M", "128M"),
            ("1.5Gi", "1536Mi"),
            ("2048Ki", "2Mi"),
            ("128Mi", "128Mi"),
            ("1Gi", "1Gi"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1000e3", "1e6"),
            ("0.1e3", "100"),
        ] {
            assert_eq!(
                parse_quantity(sent).unwrap().canonical(),
                returned,
                "{sent}"
            );
        }
    }

    #[test]
    fn sub_unit_suffix() {
        assert!(parse_quantity("128m").unwrap().has_sub_unit_suffix());
        assert!(!parse_quantity("128Mi").unwrap().has_sub_unit_suffix());
    }
}
