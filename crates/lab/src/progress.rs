//! One progress line per benchmark phase, on stderr only so stdout stays clean for
//! tables and JSON, and hidden entirely when stderr is not a terminal (CI logs, pipes).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

const BAR_TEMPLATE: &str = "{prefix:>10.bold} [{bar:30}] {pos}/{len} {rate} eta {eta} {msg}";
const SPINNER_TEMPLATE: &str = "{prefix:>10.bold} {spinner} {elapsed} {msg}";

fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A bar for a phase that counts `len` steps.
pub fn phase_bar(phase: &'static str, len: u64) -> ProgressBar {
    // The templates are constants; falling back keeps a typo from ever becoming a panic.
    let style = ProgressStyle::with_template(BAR_TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        // indicatif's own {per_sec} prints several decimals of a noisy number.
        .with_key("rate", |state: &ProgressState, out: &mut dyn std::fmt::Write| {
            let _ = write!(out, "{:.0}/s", state.per_sec());
        });
    ProgressBar::with_draw_target(Some(len), draw_target())
        .with_style(style)
        .with_prefix(phase)
}

/// Off a terminal, where the bars are hidden, a long phase of `len` steps says how far it got
/// every this many steps (a twentieth); on a terminal, never.
pub fn log_every(len: u64) -> Option<u64> {
    (!std::io::stderr().is_terminal()).then(|| (len / 20).max(1))
}

/// A spinner for a phase with no step count (setup, a single timed open).
pub fn phase_spinner(phase: &'static str, message: &'static str) -> ProgressBar {
    let style =
        ProgressStyle::with_template(SPINNER_TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_spinner());
    let spinner = ProgressBar::with_draw_target(None, draw_target())
        .with_style(style)
        .with_prefix(phase)
        .with_message(message);
    spinner.enable_steady_tick(Duration::from_millis(100));
    spinner
}
