//! Isolation probes, fourth round: multi-threaded and interleaved programs
//! against the documented isolation promises (`docs/collections.md`,
//! Isolation). `cargo test --release -p rewind-collections --test
//! iso_probe4`.

use rewind::{Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

/// A scan through `&Pool` of a map that a commit destroyed, whose header
/// block a map of other types (same kind, same sizes: `u64 -> i64`) then
/// took, ends with `Changed`, as the docs promise for an error met while
/// a writer held the collection: it ended with `TypeMismatch` ("created
/// for other value types"), when the scan, past the length it began with
/// in the new map's leaves, read the header again. Under redo, force and
/// no-force.
#[test]
fn a_scan_whose_map_is_destroyed_and_its_header_reused_by_other_types_ends_changed() {
    for policy in [Policy::Redo, Policy::Force, Policy::NoForce] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy);
        let pool = Pool::create(dir.path().join("s.pool"), "s", 16 << 20, &cfg).unwrap();
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for k in 0..8 {
                    m.insert(tx, k, k)?;
                }
                Ok::<_, Error>(m)
            })
            .unwrap();
        let mut it = m.iter(&pool).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), (0, 0));
        pool.transaction(|tx| m.destroy(tx)).unwrap();
        let m2 = pool
            .transaction(|tx| {
                let m2 = BTreeMap::<u64, i64>::create_with_fanout(tx, 4)?;
                for k in 0..200 {
                    m2.insert(tx, k, -(k as i64))?;
                }
                Ok::<_, Error>(m2)
            })
            .unwrap();
        // The case probed: the new map's header is where the old one was.
        assert_eq!(m2.as_ptr().offset(), m.as_ptr().offset(), "{policy:?}");
        let mut end = None;
        for e in it.by_ref().take(1_000) {
            if let Err(e) = e {
                end = Some(e);
                break;
            }
        }
        assert!(
            matches!(end, None | Some(Error::Changed { .. })),
            "{policy:?}: the scan ended with {end:?}"
        );
        // Read through the old handle now, the map is another's: that is
        // an answer of its own, not a scan that met a change.
        assert!(matches!(m.len(&pool), Err(Error::TypeMismatch { .. })));
    }
}
