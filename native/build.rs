//! Gives the shared library its SONAME: `libcachalot.so.0.MINOR` while the version is 0.x
//! (under cargo's rules each 0.x minor may break the ABI), `libcachalot.so.MAJOR` from 1.0.
//! A program linked against one ABI then fails to load against another instead of calling it
//! wrongly. `make install` lays out the file and its links (the Makefile's `SONAME` is
//! worked out the same way, and `make c-examples` checks that the two agree).
//!
//! It also leaves the SONAME link beside the library in the build folder
//! (`target/release/libcachalot.so.0.1 -> libcachalot.so`), as `make native-lib` does, so a
//! program linked from the build folder loads without a link made by hand. The build folder
//! is three levels above `OUT_DIR` (`<profile>/build/<crate>-<hash>/out`); a link that cannot
//! be made is a warning, not a failed build.

fn main() {
    let part = |name: &str| std::env::var(name).expect("cargo sets the package version");
    let (major, minor) = (part("CARGO_PKG_VERSION_MAJOR"), part("CARGO_PKG_VERSION_MINOR"));
    let soname = if major == "0" { format!("libcachalot.so.0.{minor}") } else { format!("libcachalot.so.{major}") };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        if let Some(profile) = out.ancestors().nth(3) {
            let link = profile.join(&soname);
            if std::fs::read_link(&link).ok().as_deref() != Some(std::path::Path::new("libcachalot.so")) {
                let _ = std::fs::remove_file(&link);
                #[cfg(unix)]
                if let Err(e) = std::os::unix::fs::symlink("libcachalot.so", &link) {
                    println!("cargo:warning=cannot link {} to libcachalot.so: {e}", link.display());
                }
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
