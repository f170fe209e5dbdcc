//! With the `peers` feature: links PMDK's libpmemobj (found by pkg-config)
//! and compiles the C no-log loop (`src/bench/peers/nolog.c`) and the shims
//! over Berkeley DB and LMDB (`bdb.c`, `lmdb.c`, linking libdb and
//! liblmdb). Without it, nothing: the default build needs neither a C
//! compiler nor any peer.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "peers")]
    peers::build();
}

#[cfg(feature = "peers")]
mod peers {
    const C_LOOP: &str = "src/bench/peers/nolog.c";
    const FLOOR_LOOP: &str = "src/bench/peers/floor.c";
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
        // The redo commit's floor loop: non-temporal stores and `clwb`.
        println!("cargo:rerun-if-changed={FLOOR_LOOP}");
        cc::Build::new()
            .file(FLOOR_LOOP)
            .opt_level(2)
            .flag("-mclwb")
            .warnings(true)
            .extra_warnings(true)
            .compile("rewind_peers_floor");
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
