//! The server under load (being written).

fn main() {}
