//! Crash-explorer programs that once found violations, replayed whole
//! (every crash point, every image) so that they stay fixed.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rewind::crashtest::{run_program, Config};

/// No-force with the smallest log: a large run rolled back, freed, and
/// one of its chunks later taken by the log. Recovery repeats history and
/// redid the run's old CLR (mark free) over every chunk of the run,
/// turning the log's chunk descriptor into a free one: the open then
/// failed with "log chunk released twice". Redo now skips an allocation
/// record when any chunk of its run is the log's.
#[test]
fn a_large_run_partly_taken_by_the_log_is_not_redone_over_it() {
    for name in ["optimized-no-force-grow", "batch-no-force-grow"] {
        let cfg = Config::parse(name).expect("a configuration");
        let stop = Arc::new(AtomicBool::new(false));
        let st = run_program(&cfg, 70, &stop, false).expect("the program runs");
        assert!(st.images > 1000, "{name}: {} images", st.images);
        assert_eq!(st.violations, 0, "{name}: {:?}", st.examples.first());
    }
}
