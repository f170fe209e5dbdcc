//! Damaged pool images never panic the library.
//!
//! A few valid images are built once on the simulated domain: force and
//! no-force pools after committed, aborted and allocating transactions (the
//! no-force ones with their records still in the log), and images taken in
//! the middle of a transaction, so the log holds an unfinished one. Each
//! case damages one: random byte flips and overwrites of 8-byte words with
//! plausible values (pointers to log blocks or heap lines, 0, 1, sizes),
//! half of them aimed at the header, the meta page, the allocator's
//! descriptors and bitmaps, and the log blocks; a truncation; or both. Then:
//!
//! * `Pool::open_image` returns `Err` with a message, or `Ok`, and then
//!   reading the root and running a few transactions (alloc, write, free,
//!   abort, checkpoint) may fail but never panics, and neither does
//!   recovering the result again;
//! * written to a file, `inspect::info`, `check` and `dump_log` and
//!   `Pool::open` on it never panic.
//!
//! A case that panics or hangs fails. A panic found here is kept below as a
//! named regression test.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use rewind::format::layout::Layout;
use rewind::{
    Backend, Error, LogVariant, OpenOptions, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};

const LAYOUT: &str = "damage";
const POOL_SIZE: u64 = 4 << 20;
const OBJS: usize = 8;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    slots: [u64; 32],
    objs: [u64; OBJS],
}

/// A valid image and where its metadata lies.
struct Image {
    what: &'static str,
    bytes: Vec<u8>,
    layout: Layout,
}

fn cfg(log: LogVariant, policy: Policy, cells: u32) -> PoolConfig {
    PoolConfig::default()
        .log(log)
        .policy(policy)
        .backend(Backend::Sim)
        .bucket_cells(cells)
        .log_size(256 << 10)
}

/// Commits a setup transaction, then `rounds` of updates, allocations and
/// frees, with every fourth one aborted.
fn populate(pool: &Pool, rounds: u64) {
    pool.transaction(|tx| {
        let r: PPtr<Root> = tx.root()?;
        let mut root = Root::zeroed();
        for (i, o) in root.objs.iter_mut().enumerate().take(OBJS / 2) {
            *o = tx.alloc_bytes(64 << i)?;
            tx.write_bytes(*o, &vec![i as u8 + 1; 64 << i])?;
        }
        tx.write(r, &root)
    })
    .unwrap();
    for round in 0..rounds {
        let r: Result<(), Error> = pool.transaction(|tx| {
            let rp: PPtr<Root> = tx.root()?;
            let mut root = tx.read(rp)?;
            for i in 0..(round % 11 + 1) {
                root.slots[((round * 7 + i * 3) % 32) as usize] = round << 8 | i;
            }
            let k = (round % OBJS as u64) as usize;
            if root.objs[k] != 0 {
                tx.free(PPtr::<u8>::from_offset(root.objs[k]))?;
                root.objs[k] = 0;
            } else {
                let size = if round % 5 == 0 {
                    70_000
                } else {
                    24 * round + 8
                };
                root.objs[k] = tx.alloc_bytes(size)?;
                tx.write_bytes(root.objs[k], &[round as u8; 8])?;
            }
            tx.write(rp, &root)?;
            if round % 4 == 3 {
                return Err(Error::TxMisuse("aborted on purpose"));
            }
            Ok(())
        });
        assert!(r.is_ok() || round % 4 == 3, "{r:?}");
    }
}

/// Every pending store persisted, as a crash right now could leave it.
fn image_now(pool: &Pool) -> Vec<u8> {
    pool.domain().with_sim(|s| s.image_all_pending()).unwrap()
}

/// An image of `pool` taken inside a transaction that has written,
/// allocated and freed, before it commits.
fn image_mid_tx(pool: &Pool) -> Vec<u8> {
    let mut img = None;
    pool.transaction(|tx| {
        let rp: PPtr<Root> = tx.root()?;
        let mut root = tx.read(rp)?;
        for (i, s) in root.slots.iter_mut().enumerate().take(20) {
            *s = 0xdead_0000 + i as u64;
        }
        let k = root.objs.iter().position(|&o| o != 0).unwrap_or(0);
        if root.objs[k] != 0 {
            tx.free(PPtr::<u8>::from_offset(root.objs[k]))?;
        }
        root.objs[k] = tx.alloc_bytes(300)?;
        tx.write(rp, &root)?;
        for i in 0..12u64 {
            tx.write(rp.cast::<u64>().at(i), &(i * 1000))?;
        }
        img = Some(image_now(pool));
        Ok::<_, Error>(())
    })
    .unwrap();
    img.unwrap()
}

fn images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let mut v = Vec::new();
        let mut add = |what, pool: &Pool, bytes: Vec<u8>| {
            // Every image is valid before it is damaged.
            Pool::open_image(bytes.clone(), LAYOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
            v.push(Image {
                what,
                bytes,
                layout: *pool.layout(),
            });
        };
        let p = Pool::create_sim(
            LAYOUT,
            POOL_SIZE,
            &cfg(LogVariant::Batch, Policy::Force, 16),
        )
        .unwrap();
        populate(&p, 30);
        add("batch force", &p, image_now(&p));
        add("batch force, mid-transaction", &p, image_mid_tx(&p));

        let p = Pool::create_sim(
            LAYOUT,
            POOL_SIZE,
            &cfg(LogVariant::Batch, Policy::NoForce, 16),
        )
        .unwrap();
        populate(&p, 30);
        add("batch no-force, records in the log", &p, image_now(&p));
        add("batch no-force, mid-transaction", &p, image_mid_tx(&p));

        let p = Pool::create_sim(
            LAYOUT,
            POOL_SIZE,
            &cfg(LogVariant::Simple, Policy::NoForce, 16),
        )
        .unwrap();
        populate(&p, 12);
        add("simple no-force, mid-transaction", &p, image_mid_tx(&p));

        let p = Pool::create_sim(
            LAYOUT,
            POOL_SIZE,
            &cfg(LogVariant::Optimized, Policy::Force, 8),
        )
        .unwrap();
        populate(&p, 20);
        add("optimized force, mid-transaction", &p, image_mid_tx(&p));
        v
    })
}

/// Where a flip lands.
#[derive(Clone, Copy, Debug)]
enum Aim {
    /// Anywhere in the image.
    Anywhere,
    /// The first 64 KiB: header, meta page, allocator metadata.
    Front,
    /// The words that matter most: header fields, root and ADLL words,
    /// chunk descriptors, bitmaps.
    Metadata,
    /// The first 256 KiB of the log region.
    Log,
}

#[derive(Clone, Debug)]
struct Damage {
    image: usize,
    flips: Vec<Flip>,
    /// Keep this many bytes (resolved against the image length).
    truncate: Option<Cut>,
}

/// One change at a position chosen by `aim` from `seed`.
#[derive(Clone, Copy, Debug)]
enum Flip {
    /// XOR one byte with a nonzero mask.
    Byte(Aim, u64, u8),
    /// Overwrite the aligned 8-byte word there with a value a pointer, a
    /// length or a count could plausibly hold.
    Word(Aim, u64, Plausible),
}

#[derive(Clone, Copy, Debug)]
enum Plausible {
    Zero,
    One,
    Max,
    /// A value near the pool size.
    NearEnd(u16),
    /// The start of some log block (a valid-looking link).
    LogBlock(u16),
    /// Some 64-byte line in the heap.
    HeapLine(u32),
}

#[derive(Clone, Copy, Debug)]
enum Cut {
    /// A fraction (in millionths) of the image.
    Fraction(u32),
    /// This many bytes short of the end.
    Short(u32),
    /// Inside the first two pages.
    Head(u16),
}

fn aim() -> impl Strategy<Value = Aim> {
    prop_oneof![
        3 => Just(Aim::Anywhere),
        1 => Just(Aim::Front),
        1 => Just(Aim::Metadata),
        1 => Just(Aim::Log),
    ]
}

fn cut() -> impl Strategy<Value = Cut> {
    prop_oneof![
        (0..1_000_000u32).prop_map(Cut::Fraction),
        (1..8192u32).prop_map(Cut::Short),
        (0..8192u16).prop_map(Cut::Head),
    ]
}

fn plausible() -> impl Strategy<Value = Plausible> {
    prop_oneof![
        Just(Plausible::Max),
        Just(Plausible::Zero),
        Just(Plausible::One),
        any::<u16>().prop_map(Plausible::NearEnd),
        any::<u16>().prop_map(Plausible::LogBlock),
        any::<u32>().prop_map(Plausible::HeapLine),
    ]
}

fn flips() -> impl Strategy<Value = Vec<Flip>> {
    let flip = prop_oneof![
        3 => (aim(), any::<u64>(), 1..=255u8).prop_map(|(a, s, m)| Flip::Byte(a, s, m)),
        1 => (aim(), any::<u64>(), plausible()).prop_map(|(a, s, v)| Flip::Word(a, s, v)),
    ];
    prop::collection::vec(flip, 1..=16)
}

fn damage() -> impl Strategy<Value = Damage> {
    (
        0..images().len(),
        prop_oneof![
            3 => flips().prop_map(|f| (f, None)),
            1 => cut().prop_map(|c| (Vec::new(), Some(c))),
            1 => (flips(), cut()).prop_map(|(f, c)| (f, Some(c))),
        ],
    )
        .prop_map(|(image, (flips, truncate))| Damage {
            image,
            flips,
            truncate,
        })
}

fn position(aim: Aim, seed: u64, len: u64, l: &Layout) -> u64 {
    let within = |start: u64, n: u64| start + seed % n.max(1);
    match aim {
        Aim::Anywhere => within(0, len),
        Aim::Front => within(0, 64 << 10),
        Aim::Metadata => {
            let regions = [
                (0, 172),   // header
                (4096, 16), // root words
                (4160, 40), // ADLL words
                (l.alloc_off, 8 * l.heap_chunks),
                (l.bitmap_off, 512 * l.heap_chunks),
            ];
            let (start, n) = regions[(seed >> 48) as usize % regions.len()];
            within(start, n)
        }
        Aim::Log => within(l.log_off, (l.log_blocks * l.log_block_size).min(256 << 10)),
    }
}

/// The damaged bytes.
fn apply(d: &Damage) -> Vec<u8> {
    let img = &images()[d.image];
    let mut b = img.bytes.clone();
    let len = b.len() as u64;
    let l = &img.layout;
    for &f in &d.flips {
        match f {
            Flip::Byte(aim, seed, mask) => {
                let at = position(aim, seed, len, l).min(len - 1);
                b[at as usize] ^= mask;
            }
            Flip::Word(aim, seed, v) => {
                let at = (position(aim, seed, len, l).min(len - 8) / 8 * 8) as usize;
                let v = match v {
                    Plausible::Zero => 0,
                    Plausible::One => 1,
                    Plausible::Max => u64::MAX,
                    Plausible::NearEnd(n) => len.wrapping_add(n as u64).wrapping_sub(1 << 15),
                    Plausible::LogBlock(k) => {
                        l.log_off + (k as u64 % l.log_blocks) * l.log_block_size
                    }
                    Plausible::HeapLine(k) => l.heap_off + (k as u64 % (l.heap_chunks * 4096)) * 64,
                };
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    if let Some(c) = d.truncate {
        let keep = match c {
            Cut::Fraction(m) => len * m as u64 / 1_000_000,
            Cut::Short(n) => len.saturating_sub(n as u64),
            Cut::Head(n) => n as u64,
        };
        b.truncate(keep as usize);
    }
    b
}

/// Uses an opened damaged pool the way a program would. Errors are fine.
/// Returns how many of its transactions committed.
fn exercise(pool: &Pool) -> u64 {
    let root = match pool.root::<Root>() {
        Ok(Some(r)) => Some((r, pool.read(r))),
        _ => None,
    };
    if let Some((_, Ok(root))) = &root {
        for &o in &root.objs {
            let mut b = [0u8; 8];
            let _ = pool.read_bytes(o, &mut b);
        }
    }
    let mut committed = 0;
    let r: Result<(), Error> = pool.transaction(|tx| {
        let rp: PPtr<Root> = tx.root()?;
        let mut root = tx.read(rp)?;
        let p = tx.alloc_bytes(200)?;
        tx.write_bytes(p, &[0x5a; 200])?;
        root.slots[0] = root.slots[0].wrapping_add(1);
        let old = std::mem::replace(&mut root.objs[1], p);
        if old != 0 {
            tx.free(PPtr::<u8>::from_offset(old))?;
        }
        tx.write(rp, &root)
    });
    committed += r.is_ok() as u64;
    let _: Result<(), Error> = pool.transaction(|tx| {
        let p = tx.alloc_bytes(70_000)?;
        tx.write_bytes(p, &[1; 4096])?;
        if let Ok(Some(r)) = pool.root::<Root>() {
            let _ = tx.write_bytes(r.offset(), &[9; 64]);
        }
        Err(Error::TxMisuse("aborted on purpose"))
    });
    let r: Result<(), Error> = pool.transaction(|tx| {
        let p = tx.alloc_bytes(100)?;
        tx.write_bytes(p, &[2; 100])?;
        tx.free(PPtr::<u8>::from_offset(p))
    });
    committed += r.is_ok() as u64;
    let _ = pool.checkpoint();
    // Recovering what we left, as after a crash now, must not panic either.
    if let Some(img) = pool.domain().with_sim(|s| s.image_all_pending()) {
        if let Ok(again) = Pool::open_image(img, LAYOUT) {
            let _ = again.root::<Root>();
        }
    }
    committed
}

static FILE_SEQ: AtomicU64 = AtomicU64::new(0);

/// What the cases saw, for the summary line.
#[derive(Default)]
struct Tally {
    opened: u64,
    committed: u64,
    refused: u64,
    /// Refusals by error variant.
    errors: BTreeMap<String, u64>,
    check_ok: u64,
    check_problems: u64,
    check_err: u64,
}

static TALLY: Mutex<Tally> = Mutex::new(Tally {
    opened: 0,
    committed: 0,
    refused: 0,
    errors: BTreeMap::new(),
    check_ok: 0,
    check_problems: 0,
    check_err: 0,
});

fn tally(f: impl FnOnce(&mut Tally)) {
    f(&mut TALLY.lock().unwrap_or_else(|p| p.into_inner()));
}

/// One case: everything that must not panic.
fn run_case(bytes: Vec<u8>) {
    match Pool::open_image(bytes.clone(), LAYOUT) {
        Ok(pool) => {
            let n = exercise(&pool);
            tally(|t| {
                t.opened += 1;
                t.committed += n;
            });
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "{e:?} has an empty message");
            let variant = format!("{e:?}");
            let variant = variant
                .split([' ', '(', '{'])
                .next()
                .unwrap_or("")
                .to_string();
            tally(|t| {
                t.refused += 1;
                *t.errors.entry(variant).or_default() += 1;
            });
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!(
        "damaged-{}.pool",
        FILE_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, &bytes).unwrap();
    inspect_file(&path);
    // And the file path of open, which maps the file and recovers in place.
    if let Ok(pool) = Pool::open(&path, LAYOUT, &OpenOptions::default()) {
        exercise(&pool);
    }
}

fn inspect_file(path: &Path) {
    if let Ok(info) = rewind::inspect::info(path) {
        assert!(!info.to_string().is_empty());
    }
    match rewind::inspect::check(path) {
        Ok(r) => {
            assert!(!r.to_string().is_empty());
            tally(|t| match r.is_ok() {
                true => t.check_ok += 1,
                false => t.check_problems += 1,
            });
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            tally(|t| t.check_err += 1);
        }
    }
    let _ = rewind::inspect::dump_log(path);
}

/// Runs a case on its own thread so a hang fails instead of blocking.
fn guarded(d: &Damage) {
    let bytes = apply(d);
    let (send, recv) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        run_case(bytes);
        let _ = send.send(());
    });
    match common::recv_watched(&recv) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic)
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "hung past REWIND_HANG_LIMIT_SECS on {} with {d:?}",
            images()[d.image].what
        ),
    }
}

#[test]
fn damaged_images_never_panic() {
    let cases = std::env::var("REWIND_DAMAGE_CASES")
        .map(|s| s.parse().expect("REWIND_DAMAGE_CASES"))
        .unwrap_or(256);
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    if let Err(e) = runner.run(&damage(), |d| {
        guarded(&d);
        Ok(())
    }) {
        panic!("{e}");
    }
    let t = TALLY.lock().unwrap();
    let errors: Vec<String> = t.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "damage: {cases} cases in {:.1} s; open_image: {} opened (then {} transactions \
         committed), {} refused ({}); check: {} consistent, {} with problems, {} refused",
        started.elapsed().as_secs_f64(),
        t.opened,
        t.committed,
        t.refused,
        errors.join(", "),
        t.check_ok,
        t.check_problems,
        t.check_err,
    );
}

#[test]
fn undamaged_images_open_and_check() {
    for img in images() {
        let pool = Pool::open_image(img.bytes.clone(), LAYOUT).unwrap();
        exercise(&pool);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("good.pool");
        std::fs::write(&path, &img.bytes).unwrap();
        let report = rewind::inspect::check(&path).unwrap();
        assert!(report.is_ok(), "{}: {report}", img.what);
    }
}

/// Library bug found by `damaged_images_never_panic`: a log cell holding a
/// value within 48 of `u64::MAX` overflows `v + record::HEADER` in
/// `log::scan` (the bounds check of the cell, `src/log/mod.rs`, "log cell
/// points outside its bucket's body"), which panics where overflow checks
/// are on (debug and test builds) instead of returning `LogCorrupt`; with
/// them off it wraps and happens to be refused by the alignment test. Found
/// as `Damage { image: 4 (simple no-force, mid-transaction), flips:
/// [Word(Anywhere, 11033629531482140928, Max)] }`: the word at 0xb100, the
/// cell of log block 41. Every variant is affected; this test sets the
/// first cell of each image's first log block (`Pool::open_image`,
/// `Pool::open` and every `inspect` function reach `log::scan`).
#[test]
fn regression_log_cell_near_u64_max() {
    for (i, img) in images().iter().enumerate() {
        let head = u64::from_le_bytes(img.bytes[4160..4168].try_into().unwrap());
        if head == 0 {
            continue; // an empty log: no cell is read
        }
        // The first cell of the list's first block.
        let d = Damage {
            image: i,
            flips: vec![Flip::Word(Aim::Anywhere, head + 64, Plausible::Max)],
            truncate: None,
        };
        println!("{}: {d:?}", img.what);
        guarded(&d);
    }
}
