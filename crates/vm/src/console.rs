//! The guest's console as the host reads it: /init's markers separate the command's stdout,
//! exit status and stderr from boot noise; `follow` reads a boot's console until the guest
//! powers off, the time runs out, or the moment comes to cut the power.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Instant;

use crate::process::{last_lines, later};
use crate::qemu::Qemu;
use crate::types::GuestRun;

/// Console lines kept for error messages.
const TAIL_LINES: usize = 40;

// Console markers printed by /init (guest/init.sh). Each is searched for anywhere in a line,
// so that a command whose output does not end in a newline still has its last line and its
// marker.
const MARK_START: &str = "@@onesync-vm:start@@";
const MARK_EXIT: &str = "@@onesync-vm:exit=";
const MARK_END: &str = "@@";
const MARK_STDERR_BEGIN: &str = "@@onesync-vm:stderr-begin@@";
const MARK_STDERR_END: &str = "@@onesync-vm:stderr-end@@";
const MARK_PROBLEM: &str = "@@onesync-vm:problem ";

/// How reading a boot's console ended.
pub(crate) enum BootEnd {
    /// qemu closed its stdout: the guest powered off (or qemu failed).
    ConsoleClosed,
    TimedOut,
    /// The moment to cut the power has come (qemu still runs: the caller kills it).
    PowerCut,
}

/// Feeds `qemu`'s console lines to `console` (and the command's stdout lines to `on_line`)
/// until the boot ends; times `run.power_cut` from the first matching line, unless the
/// command exits first.
pub(crate) fn follow(
    qemu: &Qemu,
    run: &GuestRun,
    console: &mut Console,
    on_line: &mut dyn FnMut(&str),
) -> BootEnd {
    let deadline = later(run.timeout);
    let mut cut_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return BootEnd::TimedOut;
        }
        if cut_at.is_some_and(|at| now >= at) {
            return BootEnd::PowerCut;
        }
        let wake = cut_at.map_or(deadline, |at| at.min(deadline));
        match qemu.lines.recv_timeout(wake - now) {
            Ok(line) => {
                if let Some(command_line) = console.feed(&line) {
                    on_line(command_line);
                    let cut_here = run
                        .power_cut
                        .as_ref()
                        .filter(|cut| cut_at.is_none() && command_line.starts_with(&cut.after_line_prefix));
                    if let Some(cut) = cut_here {
                        cut_at = Some(later(cut.delay));
                    }
                }
                if console.command_exited() {
                    // Too late to cut: the command has ended, let the guest unmount.
                    cut_at = None;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return BootEnd::ConsoleClosed,
        }
    }
}

/// Where /init is, as the console shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Kernel and /init messages before the start marker.
    #[default]
    Boot,
    /// The command is running: lines are its stdout.
    Command,
    /// The command has exited; its stderr follows.
    Exited,
    Stderr,
    /// Everything has been reported; what follows is the shutdown.
    Done,
}

/// The host's reading of the guest console.
#[derive(Debug, Default)]
pub(crate) struct Console {
    phase: Phase,
    pub stdout: Vec<String>,
    pub stderr: String,
    pub exit_code: Option<i32>,
    /// What /init reported as going wrong (failed insmod, mount, umount).
    pub problems: Vec<String>,
    /// The last console lines, whatever they were, for error messages.
    tail: VecDeque<String>,
}

impl Console {
    /// Takes one console line; returns it (or its part before a marker) if it is a line of
    /// the command's stdout.
    pub fn feed<'l>(&mut self, line: &'l str) -> Option<&'l str> {
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_owned());
        if let Some(problem) = marked_problem(line) {
            self.problems.push(problem.to_owned());
            return None;
        }
        match self.phase {
            Phase::Boot => {
                if line.contains(MARK_START) {
                    self.phase = Phase::Command;
                }
                None
            }
            Phase::Command => match exit_marker(line) {
                Some((before, code)) => {
                    self.exit_code = Some(code);
                    self.phase = Phase::Exited;
                    // Output that did not end in a newline shares the marker's line.
                    (!before.is_empty()).then(|| self.stdout_line(before))
                }
                None => Some(self.stdout_line(line)),
            },
            Phase::Exited => {
                if line.contains(MARK_STDERR_BEGIN) {
                    self.phase = Phase::Stderr;
                }
                None
            }
            Phase::Stderr => {
                match line.find(MARK_STDERR_END) {
                    Some(at) => {
                        self.stderr.push_str(&line[..at]);
                        self.phase = Phase::Done;
                    }
                    None => {
                        self.stderr.push_str(line);
                        self.stderr.push('\n');
                    }
                }
                None
            }
            Phase::Done => None,
        }
    }

    fn stdout_line<'l>(&mut self, line: &'l str) -> &'l str {
        self.stdout.push(line.to_owned());
        line
    }

    pub fn command_exited(&self) -> bool {
        self.exit_code.is_some()
    }

    pub fn finished(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The problems /init reported, the last console lines and qemu's stderr, for an error.
    pub fn describe(&self, qemu_stderr: &str) -> String {
        let mut text = String::new();
        for problem in &self.problems {
            text.push_str(&format!("\nin the guest: {problem}"));
        }
        text.push_str(&format!("\nlast {} console lines:", self.tail.len()));
        for line in &self.tail {
            text.push_str("\n  | ");
            text.push_str(line);
        }
        if !qemu_stderr.trim().is_empty() {
            text.push_str("\nqemu's stderr:\n");
            text.push_str(&last_lines(qemu_stderr, TAIL_LINES));
        }
        text
    }
}

/// `(what precedes the marker, exit code)` if `line` holds the exit marker.
fn exit_marker(line: &str) -> Option<(&str, i32)> {
    let at = line.rfind(MARK_EXIT)?;
    let code = line[at + MARK_EXIT.len()..].strip_suffix(MARK_END)?;
    if code.is_empty() || !code.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some((&line[..at], code.parse().ok()?))
}

fn marked_problem(line: &str) -> Option<&str> {
    let at = line.find(MARK_PROBLEM)?;
    line[at + MARK_PROBLEM.len()..].strip_suffix(MARK_END)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(lines: &[&str]) -> (Console, Vec<String>) {
        let mut console = Console::default();
        let mut command_lines = Vec::new();
        for line in lines {
            if let Some(out) = console.feed(line) {
                command_lines.push(out.to_owned());
            }
        }
        (console, command_lines)
    }

    #[test]
    fn console_markers_separate_output_exit_code_and_stderr() {
        let (console, command_lines) = feed_all(&[
            "SeaBIOS noise",
            "@@onesync-vm:problem insmod crc32_generic.ko failed@@",
            "@@onesync-vm:start@@",
            "first",
            "",
            "  a b  c",
            "no newline at the end@@onesync-vm:exit=3@@",
            "@@onesync-vm:stderr-begin@@",
            "warning: one",
            "two without newline@@onesync-vm:stderr-end@@",
            "@@onesync-vm:problem umount /mnt failed@@",
            "reboot: Power down",
        ]);
        assert_eq!(command_lines, ["first", "", "  a b  c", "no newline at the end"]);
        assert_eq!(console.stdout, command_lines);
        assert_eq!(console.exit_code, Some(3));
        assert_eq!(console.stderr, "warning: one\ntwo without newline");
        assert!(console.finished());
        assert_eq!(
            console.problems,
            ["insmod crc32_generic.ko failed", "umount /mnt failed"]
        );
    }

    #[test]
    fn console_without_output_or_end_marker() {
        let (console, lines) = feed_all(&[
            "@@onesync-vm:start@@",
            "@@onesync-vm:exit=0@@",
            "@@onesync-vm:stderr-begin@@",
            "@@onesync-vm:stderr-end@@",
        ]);
        assert!(lines.is_empty());
        assert_eq!((console.exit_code, console.stderr.as_str()), (Some(0), ""));
        assert!(console.finished());

        // Cut off: no exit status, and the error shows the last lines.
        let (console, lines) = feed_all(&["boot", "@@onesync-vm:start@@", "working", "exit=1@@"]);
        assert_eq!(lines, ["working", "exit=1@@"]);
        assert!(!console.command_exited() && !console.finished());
        let described = console.describe("qemu: something");
        assert!(
            described.contains("  | working") && described.contains("qemu: something"),
            "{described}"
        );

        // Before the start marker nothing is the command's.
        let (console, lines) = feed_all(&["@@onesync-vm:exit=0@@", "text"]);
        assert!(lines.is_empty() && console.exit_code.is_none());
    }

    #[test]
    fn exit_marker_needs_digits_and_the_end() {
        assert_eq!(exit_marker("@@onesync-vm:exit=255@@"), Some(("", 255)));
        assert_eq!(exit_marker("x@@onesync-vm:exit=0@@"), Some(("x", 0)));
        assert_eq!(exit_marker("@@onesync-vm:exit=@@"), None);
        assert_eq!(exit_marker("@@onesync-vm:exit=-1@@"), None);
        assert_eq!(exit_marker("@@onesync-vm:exit=1@@ trailing"), None);
    }

    #[test]
    fn console_keeps_only_the_last_lines() {
        let mut console = Console::default();
        for index in 0..100 {
            console.feed(&format!("line {index}"));
        }
        assert_eq!(console.tail.len(), TAIL_LINES);
        assert_eq!(console.tail.front().map(String::as_str), Some("line 60"));
    }
}
