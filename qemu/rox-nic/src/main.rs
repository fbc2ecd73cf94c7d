fn main() {
    println!("rox-nic {}", env!("CARGO_PKG_VERSION"));
}
