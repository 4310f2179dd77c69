// pkv-sys links nothing at build time: libpkv.so.1 is loaded at run time (libloading, dlopen:
// $PKV_LIBRARY, else the dynamic loader's search for libpkv.so.1), so a crate using it builds
// without libpkv installed. The build script exists for `links = "pkv"` (one pkv-sys per build,
// as for every -sys crate) and passes the SONAME to dependents as DEP_PKV_SONAME.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:soname=libpkv.so.1");
}
