//! `onesync-lab`: the lab's command (the library, `src/lib.rs`, is all of it).

fn main() -> std::process::ExitCode {
    onesync_lab::main_entry()
}
