//! Showing manifest problems to a person: each one as a miette diagnostic that quotes the YAML and
//! underlines the place, with its code and what to write instead.

use std::fmt;
use std::io::IsTerminal;

use af_manifest::{InvalidManifest, Problem};
use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode,
};

/// One problem, bound to the text it points into.
struct ProblemDiagnostic<'a> {
    problem: &'a Problem,
    source: &'a NamedSource<String>,
}

impl fmt::Debug for ProblemDiagnostic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.problem, f)
    }
}

impl fmt::Display for ProblemDiagnostic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problem.message)
    }
}

impl std::error::Error for ProblemDiagnostic<'_> {}

impl Diagnostic for ProblemDiagnostic<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.problem.code))
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(&self.problem.help))
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.problem
            .location
            .map(|_| self.source as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let at = self.problem.location?;
        // Mappings have no length of their own; underline one character so the place still shows.
        let len = at
            .len
            .max(1)
            .min(self.source.inner().len().saturating_sub(at.offset));
        let label = LabeledSpan::new(Some("here".to_string()), at.offset, len);
        Some(Box::new(std::iter::once(label)))
    }
}

/// Every problem of a refused manifest, rendered for standard error, followed by a count.
pub fn render(invalid: &InvalidManifest) -> String {
    let file = invalid.file.display().to_string();
    let source = NamedSource::new(&file, invalid.source_text.clone());
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let theme = if colour {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme).with_context_lines(2);
    let mut out = String::new();
    for problem in &invalid.problems {
        let diagnostic = ProblemDiagnostic {
            problem,
            source: &source,
        };
        if handler.render_report(&mut out, &diagnostic).is_err() {
            // Rendering into a String cannot fail in practice; fall back to the plain line anyway.
            out.push_str(&format!("{file}: {problem}\n"));
        }
        out.push('\n');
    }
    let count = invalid.problems.len();
    out.push_str(&format!(
        "{file}: {count} problem{} found; nothing was changed.\n",
        if count == 1 { "" } else { "s" }
    ));
    out
}
