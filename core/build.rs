//! Puts each Lua script together and hashes it at build time: EVALSHA needs each script's
//! SHA1, and a fresh instance per request would otherwise hash every script on every
//! request. Writes one `Script` constant (source and SHA1) per script for
//! core/src/redis.rs, each script's source being `lua/records.lua` (the buyers' record
//! prefixes, named once), then the files of the script's own folder if it has one
//! (`lua/admission/*.lua`: jobs of the script in files of their own, in name order), then
//! the script; and the table of each Redis Cluster slot's tag for core/src/redis_cluster/mod.rs.

use std::fmt::Write;
use std::path::Path;

use sha1::{Digest, Sha1};

const SCRIPTS: [&str; 24] = [
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
    "ask_mysql",
    "raise",
    "walk_end",
    "clear",
    "end_turn",
    "end_sweep",
    "reopen",
    "leave",
    "change",
];

fn main() {
    let out_dir = std::env::var("OUT_DIR").unwrap();
    // The whole folder, so that a script's new folder of parts is seen too.
    println!("cargo:rerun-if-changed=../lua");
    let mut out = String::new();
    let prelude = read("../lua/records.lua");
    for name in SCRIPTS {
        let mut source = prelude.clone();
        if let Ok(parts) = std::fs::read_dir(format!("../lua/{name}")) {
            let mut parts: Vec<_> = parts.map(|part| part.unwrap().path()).collect();
            parts.sort();
            for part in parts {
                source.push_str(&read(&part.to_string_lossy()));
            }
        }
        source.push_str(&read(&format!("../lua/{name}.lua")));
        let hex = Sha1::new().chain_update(&source).finalize().iter().fold(
            String::new(),
            |mut hex, byte| {
                write!(hex, "{byte:02x}").unwrap();
                hex
            },
        );
        std::fs::write(Path::new(&out_dir).join(format!("{name}.lua")), &source).unwrap();
        writeln!(
            out,
            "pub const {}: Script = Script {{ name: \"{name}\", source: include_str!(concat!(env!(\"OUT_DIR\"), \"/{name}.lua\")), sha1: \"{hex}\" }};",
            name.to_uppercase()
        )
        .unwrap();
    }
    std::fs::write(Path::new(&out_dir).join("scripts.rs"), out).unwrap();
    std::fs::write(Path::new(&out_dir).join("slot_tags.rs"), slot_tags()).unwrap();
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `SLOT_TAGS[slot]`: the smallest number whose decimal digits hash to `slot`, as Redis
/// Cluster hashes a key (CRC16/XMODEM modulo 16384): the hash tag of the keys every
/// voucher of that slot shares.
fn slot_tags() -> String {
    const SLOTS: usize = 16384;
    let crc = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    let mut tags = vec![u32::MAX; SLOTS];
    let mut left = SLOTS;
    let mut n = 0u32;
    while left > 0 {
        let slot = crc.checksum(n.to_string().as_bytes()) as usize % SLOTS;
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            left -= 1;
        }
        n += 1;
    }
    let mut out = format!("pub(crate) static SLOT_TAGS: [u32; {SLOTS}] = [");
    for tag in tags {
        write!(out, "{tag},").unwrap();
    }
    out.push_str("];\n");
    out
}
