//! Gives the shared library its SONAME: `libcachalot.so.0.MINOR` while the version is 0.x
//! (under cargo's rules each 0.x minor may break the ABI), `libcachalot.so.MAJOR` from 1.0.
//! A program linked against one ABI then fails to load against another instead of calling it
//! wrongly. `make install` lays out the file and its links (the Makefile's `SONAME` is
//! worked out the same way, and `make c-examples` checks that the two agree).

fn main() {
    let part = |name: &str| std::env::var(name).expect("cargo sets the package version");
    let (major, minor) = (part("CARGO_PKG_VERSION_MAJOR"), part("CARGO_PKG_VERSION_MINOR"));
    let soname = if major == "0" { format!("libcachalot.so.0.{minor}") } else { format!("libcachalot.so.{major}") };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
