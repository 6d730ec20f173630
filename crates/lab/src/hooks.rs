//! Whether this build has the store's test hooks, and the refusal of a command that needs
//! them in a build without: below the commands that ask, beside the crate root that
//! re-exports the build line for the tests.

/// How to build the binary with the test hooks (named by the refusals of a build without them).
pub const TEST_HOOKS_BUILD: &str =
    "cargo build --release --workspace --features onesync-lab/test-hooks --bin onesync-lab-hooked";

/// Whether this build has the test hooks (feature `test-hooks`).
pub const HAS_TEST_HOOKS: bool = cfg!(feature = "test-hooks");

/// An error for `what`, which needs the test hooks, in a build without them; `Ok` in a build
/// with them.
pub(crate) fn needs_test_hooks(what: &str) -> anyhow::Result<()> {
    if HAS_TEST_HOOKS {
        return Ok(());
    }
    anyhow::bail!(
        "{what} needs the store's test hooks, which this onesync-lab is built without (the \
         feature `test-hooks`): build them with `{TEST_HOOKS_BUILD}` and run \
         target/release/onesync-lab-hooked"
    )
}
