//! Showing config problems to a person, as `af validate` shows manifest problems: each one a
//! miette report that quotes the file and marks the place, with its code and what to do. A problem
//! without a file line (a folder, a cluster object) is one plain line.

use std::fmt;
use std::io::IsTerminal;

use afe_config::{Diagnostic, InvalidConfig, Origin};
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};

/// One problem, bound to the text of its file.
struct Report<'a> {
    diagnostic: &'a Diagnostic,
    source: NamedSource<String>,
    offset: usize,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diagnostic, f)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.diagnostic.place.path.is_empty() {
            f.write_str(&self.diagnostic.message)
        } else {
            write!(
                f,
                "{}: {}",
                self.diagnostic.place.path, self.diagnostic.message
            )
        }
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diagnostic.code))
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(&self.diagnostic.help))
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let len = usize::from(self.offset < self.source.inner().len());
        let label = LabeledSpan::new(Some("here".to_string()), self.offset, len);
        Some(Box::new(std::iter::once(label)))
    }
}

/// Every problem, rendered for standard error, followed by the count.
pub fn render(invalid: &InvalidConfig) -> String {
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let theme = if colour {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme).with_context_lines(2);
    let mut out = String::new();
    for diagnostic in &invalid.diagnostics {
        let quoted = match (&diagnostic.place.origin, diagnostic.place.line_column) {
            (Origin::File(path), Some((line, column))) => {
                std::fs::read_to_string(path).ok().map(|text| {
                    let offset =
                        af_manifest::tree::byte_offset_of(&text, line.into(), column.into());
                    Report {
                        diagnostic,
                        source: NamedSource::new(path.display().to_string(), text),
                        offset,
                    }
                })
            }
            _ => None,
        };
        match quoted {
            Some(report) if handler.render_report(&mut out, &report).is_ok() => {}
            _ => out.push_str(&format!("{diagnostic}\n")),
        }
        out.push('\n');
    }
    let count = invalid.diagnostics.len();
    out.push_str(&format!(
        "{count} problem{} in the config; nothing was published.\n",
        if count == 1 { "" } else { "s" }
    ));
    out
}
