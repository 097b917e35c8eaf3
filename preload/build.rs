//! Builds the C shim for the variadic entry points and links libexsock.so with the ELF version
//! script that exports only the interposed symbols and the `ddp_*` API.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-changed=exsock.map");
    cc::Build::new()
        .file("shim.c")
        .flag("-fvisibility=default")
        .flag_if_supported("-fno-strict-aliasing")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .link_lib_modifier("+whole-archive")
        .compile("exsock_shim");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exsock.map");
}
