//! The crate's internals for the cargo-fuzz targets in `fuzz/`, which hold the scenarios.
//! Compiled only with `--cfg shmlog_fuzz`; not API.
