//! `onesync-lab-hooked`: the lab's command built with the feature `test-hooks` (the store's
//! sabotage, `ONESYNC_IO_LOG` write log and invariant checks), for the explorer, the
//! tortures and the negative controls. Its own name, so that a workspace build of
//! `onesync-lab` (without the hooks) never replaces it.

fn main() -> std::process::ExitCode {
    onesync_lab::main_entry()
}
