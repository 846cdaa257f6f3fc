//! Which of its own log lines the binary writes: `RUST_LOG` read as targets and levels (`warn`,
//! `info,af_egress=debug`), as `tracing_subscriber`'s `Targets` parses them. Span and field
//! matching (`EnvFilter`) is left out on purpose: it links a regular-expression engine into every
//! sidecar, a quarter of a megabyte of code the kernel maps in with the rest of the executable.

use tracing_subscriber::filter::{LevelFilter, Targets};

/// The level when `RUST_LOG` is unset or cannot be read.
const DEFAULT: LevelFilter = LevelFilter::INFO;

/// The filter `RUST_LOG` (`value`) asks for, and a warning to print when it cannot be read (the
/// default level is used then: a typo must not silence the sidecar's log).
pub fn from_setting(value: Option<&str>) -> (Targets, Option<String>) {
    let default = Targets::new().with_default(DEFAULT);
    let Some(text) = value.filter(|text| !text.trim().is_empty()) else {
        return (default, None);
    };
    match text.parse::<Targets>() {
        Ok(targets) => (targets, None),
        Err(err) => (
            default,
            Some(format!(
                "RUST_LOG={text:?} is not a list of levels and target=level pairs ({err}); logging at {DEFAULT}"
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::filter::LevelFilter;

    use super::from_setting;

    #[test]
    fn unset_or_empty_is_info() {
        for value in [None, Some(""), Some("  ")] {
            let (targets, warning) = from_setting(value);
            assert_eq!(targets.default_level(), Some(LevelFilter::INFO));
            assert!(warning.is_none());
        }
    }

    #[test]
    fn a_level_and_targets_are_read_as_given() {
        let (targets, warning) = from_setting(Some("warn,af_egress::tunnel=debug"));
        assert!(warning.is_none());
        assert_eq!(targets.default_level(), Some(LevelFilter::WARN));
        assert!(targets.would_enable("af_egress::tunnel", &tracing::Level::DEBUG));
        assert!(!targets.would_enable("af_egress::dns", &tracing::Level::INFO));
    }

    #[test]
    fn what_cannot_be_read_keeps_info_and_says_why() {
        let (targets, warning) = from_setting(Some("af_egress=loud"));
        assert_eq!(targets.default_level(), Some(LevelFilter::INFO));
        let warning = warning.expect("a warning");
        assert!(warning.contains("af_egress=loud"), "{warning}");
    }
}
