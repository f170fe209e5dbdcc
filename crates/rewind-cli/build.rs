//! On x86_64, always: compiles the redo commit's floor loop
//! (`src/bench/peers/floor.c`, the `bench overhead` floor row) with the C
//! compiler Rust's own linking already needs. With the `peers` feature
//! also: links PMDK's libpmemobj (found by pkg-config) and compiles the C
//! no-log loop (`src/bench/peers/nolog.c`) and the shims over Berkeley DB
//! and LMDB (`bdb.c`, `lmdb.c`, linking libdb and liblmdb). The default
//! build needs no peer.

const FLOOR_LOOP: &str = "src/bench/peers/floor.c";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The floor loop is x86_64 code (`movnti`, `clwb`, `sfence`).
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        println!("cargo:rerun-if-changed={FLOOR_LOOP}");
        cc::Build::new()
            .file(FLOOR_LOOP)
            .opt_level(2)
            // Non-temporal stores and `clwb` (`_mm_clwb`), as rewind's Pmem backend uses.
            .flag("-mclwb")
            .warnings(true)
            .extra_warnings(true)
            .compile("rewind_peers_floor");
    }
    #[cfg(feature = "peers")]
    peers::build();
}

#[cfg(feature = "peers")]
mod peers {
    const C_LOOP: &str = "src/bench/peers/nolog.c";
    /// The C shims and the library each links.
    const SHIMS: [(&str, &str, &str); 2] = [
        ("src/bench/peers/bdb.c", "rewind_peers_bdb", "db"),
        ("src/bench/peers/lmdb.c", "rewind_peers_lmdb", "lmdb"),
    ];

    pub fn build() {
        println!("cargo:rerun-if-changed={C_LOOP}");
        // Emits the link lines for libpmemobj (and its search path).
        if let Err(e) = pkg_config::Config::new()
            .atleast_version("1.4")
            .probe("libpmemobj")
        {
            panic!(
                "the `peers` feature needs PMDK's libpmemobj, found by pkg-config: {e}\n\
                 install it with `scripts/install-peers.sh` (Debian/Ubuntu: libpmemobj-dev, \
                 pkg-config, gcc, libc6-dev), or build without `--features peers`"
            );
        }
        cc::Build::new()
            .file(C_LOOP)
            .opt_level(2)
            // The loop's write-back is `clwb` (`_mm_clwb`), as rewind's Pmem backend uses.
            .flag("-mclwb")
            .warnings(true)
            .extra_warnings(true)
            .compile("rewind_peers_nolog");
        for (file, name, lib) in SHIMS {
            println!("cargo:rerun-if-changed={file}");
            cc::Build::new()
                .file(file)
                .opt_level(2)
                .warnings(true)
                .compile(name);
            // Debian: libdb-dev (db.h, libdb.so), liblmdb-dev (lmdb.h, liblmdb.so).
            println!("cargo:rustc-link-lib={lib}");
        }
    }
}
