//! How `af up` and `af down` show progress: a live display on a terminal (a spinner per step
//! running, each turned into a `✓` line when it finishes, the step's current wait beside it),
//! plain lines when standard error is not a terminal (logs, CI), JSON lines with `--json`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use af_runtime::{ProgressEvent, ProgressSink, Step};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The line an event leaves in a log; on a terminal, the line a finished step or a one-off event
/// leaves behind (a step running is a spinner there instead).
pub fn settled_line(event: &ProgressEvent) -> String {
    match event {
        ProgressEvent::StepStarted { step, detail } => format!("▸ {step:?}: {detail}"),
        ProgressEvent::StepFinished {
            step,
            detail,
            elapsed,
        } => format!("✓ {step:?} ({:.1}s): {detail}", elapsed.as_secs_f64()),
        ProgressEvent::Waiting { on, .. } => format!("  waiting for {on}"),
        ProgressEvent::Url { service, url } => format!("  {service}: {url}"),
        ProgressEvent::Notice { message } => format!("  note: {message}"),
    }
}

/// Picks the display for this invocation.
pub fn for_invocation(json: bool) -> Box<dyn ProgressSink> {
    if json {
        Box::new(JsonLines)
    } else if std::io::stderr().is_terminal() {
        Box::new(Live::new(ProgressDrawTarget::stderr()))
    } else {
        Box::new(PlainLines)
    }
}

/// One JSON object per event on standard output.
struct JsonLines;

impl ProgressSink for JsonLines {
    fn emit(&self, event: ProgressEvent) {
        if let Ok(line) = serde_json::to_string(&event) {
            println!("{line}");
        }
    }
}

/// One line per event on standard error.
struct PlainLines;

impl ProgressSink for PlainLines {
    fn emit(&self, event: ProgressEvent) {
        let _ = writeln!(std::io::stderr(), "{}", settled_line(&event));
    }
}

/// A step being shown as a spinner.
struct Running {
    step: Step,
    detail: String,
    bar: ProgressBar,
}

/// The terminal display. Steps of one kind can run at the same time (the services of one wave),
/// so a step is known by its kind and its detail.
struct Live {
    multi: MultiProgress,
    running: Mutex<Vec<Running>>,
}

impl Live {
    fn new(target: ProgressDrawTarget) -> Live {
        Live {
            multi: MultiProgress::with_draw_target(target),
            running: Mutex::new(Vec::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn print(&self, line: &str) {
        if self.multi.println(line).is_err() {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}

impl ProgressSink for Live {
    fn emit(&self, event: ProgressEvent) {
        match &event {
            ProgressEvent::StepStarted { step, detail } => {
                let bar = self.multi.add(ProgressBar::new_spinner());
                if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
                    bar.set_style(style);
                }
                bar.set_message(format!("{step:?}: {detail}"));
                bar.enable_steady_tick(Duration::from_millis(100));
                self.running().push(Running {
                    step: *step,
                    detail: detail.clone(),
                    bar,
                });
            }
            ProgressEvent::StepFinished { step, detail, .. } => {
                let mut running = self.running();
                let found = running
                    .iter()
                    .position(|r| r.step == *step && r.detail == *detail);
                match found.map(|index| running.remove(index)) {
                    Some(done) => {
                        drop(running);
                        done.bar.finish_and_clear();
                        self.multi.remove(&done.bar);
                        self.print(&settled_line(&event));
                    }
                    None => {
                        drop(running);
                        self.print(&settled_line(&event));
                    }
                }
            }
            ProgressEvent::Waiting { within, on, .. } => {
                let running = self.running();
                match running.iter().find(|r| r.detail == *within) {
                    Some(r) => r
                        .bar
                        .set_message(format!("{:?}: {} — waiting for {on}", r.step, r.detail)),
                    None => {
                        drop(running);
                        self.print(&settled_line(&event));
                    }
                }
            }
            ProgressEvent::Url { .. } | ProgressEvent::Notice { .. } => {
                self.print(&settled_line(&event));
            }
        }
    }
}

impl Drop for Live {
    /// A step still spinning when the display goes (the step failed): its line stays, marked.
    fn drop(&mut self) {
        for running in self.running().drain(..) {
            running
                .bar
                .abandon_with_message(format!("✗ {:?}: {}", running.step, running.detail));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Live {
        fn spinners(&self) -> usize {
            self.running().len()
        }
    }

    #[test]
    fn a_step_spins_until_its_own_finish_even_among_steps_of_its_kind() {
        let live = Live::new(ProgressDrawTarget::hidden());
        let started = |detail: &str| ProgressEvent::StepStarted {
            step: Step::Services,
            detail: detail.into(),
        };
        live.emit(started("worker (1 instance)"));
        live.emit(started("report (1 instance)"));
        assert_eq!(live.spinners(), 2);
        live.emit(ProgressEvent::Waiting {
            step: Step::Readiness,
            within: "worker (1 instance)".into(),
            on: "worker-0 port 9090".into(),
            elapsed: Duration::ZERO,
        });
        assert!(
            live.running()[0]
                .bar
                .message()
                .ends_with("waiting for worker-0 port 9090")
        );
        live.emit(ProgressEvent::StepFinished {
            step: Step::Services,
            detail: "report (1 instance)".into(),
            elapsed: Duration::from_millis(1200),
        });
        assert_eq!(live.spinners(), 1);
        assert_eq!(live.running()[0].detail, "worker (1 instance)");
        // A finish nobody started, or a wait outside any step, is printed, not lost.
        live.emit(ProgressEvent::StepFinished {
            step: Step::Probe,
            detail: "x".into(),
            elapsed: Duration::ZERO,
        });
        assert_eq!(live.spinners(), 1);
    }

    #[test]
    fn settled_lines_read_the_same_in_a_log() {
        assert_eq!(
            settled_line(&ProgressEvent::StepFinished {
                step: Step::Probe,
                detail: "every escape route".into(),
                elapsed: Duration::from_millis(750),
            }),
            "✓ Probe (0.8s): every escape route"
        );
        assert_eq!(
            settled_line(&ProgressEvent::Url {
                service: "web".into(),
                url: "http://127.0.0.1:1".into()
            }),
            "  web: http://127.0.0.1:1"
        );
    }
}
