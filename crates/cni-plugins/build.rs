//! `cargo build-plugins` links the binary with `link-order.txt` (see `.cargo/config.toml`),
//! a file cargo does not otherwise know about: a new list must relink the binary.

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
}
