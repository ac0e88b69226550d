//! Links the cdylib with `libibverbs.map`: the version nodes
//! (IBVERBS_1.1, MLX5_1.3, RDMACM_1.0, ...) that programs linked against
//! rdma-core ask for. The symbols are bound to their nodes by `.symver`
//! directives in `src/entry/symver.rs`; rustc's own version script keeps
//! the rest of the library's symbols local.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rerun-if-changed=libibverbs.map");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    }
}
