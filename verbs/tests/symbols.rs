//! The built `libperf_verbs.so` carries each symbol that Debian's perftest
//! and ibverbs-utils binaries import under the version node they ask for
//! (`tests/debian-imports.txt`), as the dynamic loader resolves it: a
//! symbol exported without its node (rust-lld's default, `Base`) would
//! make the loader refuse the program.

#![allow(unsafe_code, reason = "dlopen and dlvsym of the built library")]

use std::ffi::{c_void, CString};
use std::path::PathBuf;

/// The cdylib cargo built beside this test (in `deps/`) or one level up.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let looked = [deps.join(perf_verbs::LIBRARY_FILE), deps.join("..").join(perf_verbs::LIBRARY_FILE)];
    looked.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| panic!("no {looked:?}"))
}

/// `dlvsym(handle, name, version)`.
fn versioned(handle: *mut c_void, name: &str, version: &str) -> *mut c_void {
    let (n, v) = (CString::new(name).expect("name"), CString::new(version).expect("version"));
    // SAFETY: a handle from dlopen and NUL-terminated strings.
    unsafe { libc::dlvsym(handle, n.as_ptr(), v.as_ptr()) }
}

#[test]
fn every_symbol_the_debian_programs_import_has_its_version_node() {
    let path = CString::new(library().to_string_lossy().as_bytes()).expect("path");
    // SAFETY: loading a library of this crate; its initialisers connect to nothing.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {path:?} failed");
    let imports = include_str!("debian-imports.txt");
    let mut missing = Vec::new();
    let mut checked = 0;
    for line in imports.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (version, name) = line.split_once(' ').expect("VERSION NAME");
        if versioned(handle, name, version).is_null() {
            missing.push(format!("{name}@{version}"));
        }
        checked += 1;
    }
    assert!(checked >= 70, "the list has {checked} symbols");
    assert!(missing.is_empty(), "not exported under their nodes: {missing:?}");
    // A node the library does not define resolves nothing.
    assert!(versioned(handle, "ibv_reg_mr", "IBVERBS_9.9").is_null());
}
