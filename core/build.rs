//! Hashes the Lua scripts at build time: EVALSHA needs each script's SHA1, and a fresh
//! instance per request would otherwise hash every script on every request. Writes one
//! `Script` constant (source and SHA1) per script for core/src/redis.rs.

use std::fmt::Write;
use std::path::Path;

use sha1::{Digest, Sha1};

const SCRIPTS: [&str; 15] = [
    "admission",
    "publish",
    "unlock",
    "claim",
    "load",
    "stage",
    "view",
    "record",
    "restock",
    "end",
    "metrics",
    "count",
    "probed",
    "audit",
    "heal",
];

fn main() {
    let mut out = String::new();
    for name in SCRIPTS {
        let path = format!("../lua/{name}.lua");
        println!("cargo:rerun-if-changed={path}");
        let source = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let hex = Sha1::digest(&source)
            .iter()
            .fold(String::new(), |mut hex, byte| {
                write!(hex, "{byte:02x}").unwrap();
                hex
            });
        writeln!(
            out,
            "pub const {}: Script = Script {{ name: \"{name}\", source: include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/{path}\")), sha1: \"{hex}\" }};",
            name.to_uppercase()
        )
        .unwrap();
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("scripts.rs");
    std::fs::write(dest, out).unwrap();
}
