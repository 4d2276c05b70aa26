//! The `jpower` binary: daemon and CLI in one (see `jpower --help`).
fn main() {
    std::process::exit(jpower::cli::main());
}
