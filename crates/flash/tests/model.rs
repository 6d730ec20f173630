//! Random sequences of write/trim/flush/read and transactional read/write/commit/abort on a
//! 16-block drive (garbage collection runs all the time), every read checked against a
//! reference model and the FTL's internal invariants checked after every operation.
//! `ONESYNC_FLASH_CASES` sets the number of cases (default 1000).

mod support;

use proptest::prelude::*;
use support::{case, cases, config, run};

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(1000), ..ProptestConfig::default() })]

    #[test]
    fn drive_matches_the_model(c in case(false, 1500)) {
        let st = run(config(&c), &c, true).map_err(TestCaseError::fail)?;
        prop_assert_eq!(st.cuts, 1); // only the final one
    }
}
