//! Negative controls' options. A defect put back (`Options::sabotage`) exists only in builds
//! with the feature `test-hooks` (`cargo test --release -p onesync-store --features
//! test-hooks,invariants`); the tests that need one are built only then, and the others pass
//! `None` either way. Each test file that needs it includes it as `mod sabotage`.

use onesync_store::{Options, Sabotage};

/// `opts` with `sabotage` put back.
pub fn with_sabotage(opts: Options, sabotage: Option<Sabotage>) -> Options {
    #[cfg(feature = "test-hooks")]
    return Options { sabotage, ..opts };
    #[cfg(not(feature = "test-hooks"))]
    {
        assert!(sabotage.is_none(), "a sabotage needs the feature test-hooks");
        opts
    }
}
