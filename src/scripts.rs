//! Running the Lua scripts in `lua/` by EVALSHA, with the EVAL fallback for when Redis
//! has forgotten them (a restart or `SCRIPT FLUSH` empties its script cache).

use spin_sdk::redis::{Connection, Error, RedisParameter, RedisResult};

// ADMISSION_SHA1, UNLOCK_SHA1 and LOAD_SHA1, computed by build.rs.
include!(concat!(env!("OUT_DIR"), "/script_sha1.rs"));

pub struct Script {
    source: &'static str,
    sha1: &'static str,
}

pub const ADMISSION: Script = Script {
    source: include_str!("../lua/admission.lua"),
    sha1: ADMISSION_SHA1,
};
pub const UNLOCK: Script = Script {
    source: include_str!("../lua/unlock.lua"),
    sha1: UNLOCK_SHA1,
};
pub const LOAD: Script = Script {
    source: include_str!("../lua/load.lua"),
    sha1: LOAD_SHA1,
};

impl Script {
    /// One round trip normally; two after Redis lost its script cache (EVAL also caches
    /// the script again, so the next EVALSHA finds it).
    pub fn run(
        &self,
        redis: &Connection,
        keys: &[String],
        args: Vec<RedisParameter>,
    ) -> Result<Vec<RedisResult>, Error> {
        let mut params = Vec::with_capacity(2 + keys.len() + args.len());
        params.push(RedisParameter::Binary(self.sha1.as_bytes().to_vec()));
        params.push(RedisParameter::Int64(keys.len() as i64));
        params.extend(
            keys.iter()
                .map(|key| RedisParameter::Binary(key.clone().into_bytes())),
        );
        params.extend(args);
        match redis.execute("EVALSHA", &params) {
            Err(Error::Other(message)) if is_noscript(&message) => {
                params[0] = RedisParameter::Binary(self.source.as_bytes().to_vec());
                redis.execute("EVAL", &params)
            }
            result => result,
        }
    }
}

/// Spin passes Redis error replies on as text; depending on the host's Redis client the
/// NOSCRIPT reply reads "NOSCRIPT ..." or "NoScriptError: ...".
fn is_noscript(message: &str) -> bool {
    message.to_ascii_lowercase().contains("noscript")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sha1_is_the_hash_of_its_script() {
        use sha1::{Digest, Sha1};
        for script in [ADMISSION, UNLOCK, LOAD] {
            let hex: String = Sha1::digest(script.source.as_bytes())
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            assert_eq!(script.sha1, hex);
        }
    }

    #[test]
    fn recognises_noscript_in_either_spelling() {
        assert!(is_noscript("NOSCRIPT No matching script. Please use EVAL."));
        assert!(is_noscript(
            "NoScriptError: No matching script. Please use EVAL."
        ));
        assert!(!is_noscript("ERR wrong number of arguments"));
    }

    #[test]
    fn every_script_documents_its_interface() {
        for script in [ADMISSION, UNLOCK, LOAD] {
            for section in ["KEYS[1]", "ARGV[1]", "Returns"] {
                assert!(script.source.contains(section), "missing {section}");
            }
        }
    }
}
