//! The `etcd-ipam` binary starts at `cni_os::relay`'s entry point, not libc's `_start`: a
//! plugin whose configuration names a node agent hands its ADD or DEL to the agent before
//! libc starts (why: `cni_os::relay`). `--undefined` makes the linker take the entry's
//! object in, whatever else the binary uses. x86_64 only: elsewhere the binary starts at
//! libc's `_start`, and the relay is not there.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch == "x86_64" && os == "linux" {
        println!("cargo:rustc-link-arg-bin=etcd-ipam=-Wl,--undefined=cni_rs_relay_start");
        println!("cargo:rustc-link-arg-bin=etcd-ipam=-Wl,--entry=cni_rs_relay_start");
    }
}
