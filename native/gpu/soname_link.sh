# Sourced by the GPU scripts that link programs against target/release/libcachalot.so, from the
# repository root.
#
# soname_link LIB: the library names itself by its SONAME (libcachalot.so.0.1, native/build.rs),
# so a program linked with -lcachalot loads that name at run time. `make install` makes the link;
# the device tool carries no symlinks, so the scripts make it beside the carried library.
soname_link() {
    local name
    if command -v objdump >/dev/null; then
        name=$(objdump -p "$1" | awk '$1 == "SONAME" { print $2 }')
    elif command -v readelf >/dev/null; then
        name=$(readelf -d "$1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    else
        echo "soname_link: neither objdump nor readelf is installed, so the SONAME link for $1 cannot be made" >&2
        return 1
    fi
    if [ -n "$name" ] && [ "$name" != "$(basename "$1")" ]; then
        ln -sf "$(basename "$1")" "$(dirname "$1")/$name"
    fi
}
