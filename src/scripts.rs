//! Running the Lua scripts in `lua/` by EVALSHA, with the EVAL fallback for when Redis
//! has forgotten them (a restart or `SCRIPT FLUSH` empties its script cache).

use sha1::{Digest, Sha1};
use spin_sdk::redis::{Connection, Error, RedisParameter, RedisResult};

pub struct Script {
    source: &'static str,
}

pub const ADMISSION: Script = Script {
    source: include_str!("../lua/admission.lua"),
};
pub const UNLOCK: Script = Script {
    source: include_str!("../lua/unlock.lua"),
};
pub const LOAD: Script = Script {
    source: include_str!("../lua/load.lua"),
};

impl Script {
    pub fn sha1_hex(&self) -> String {
        Sha1::digest(self.source.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// One round trip normally; two after Redis lost its script cache (EVAL also caches
    /// the script again, so the next EVALSHA finds it).
    pub fn run(
        &self,
        redis: &Connection,
        keys: &[String],
        args: Vec<RedisParameter>,
    ) -> Result<Vec<RedisResult>, Error> {
        let mut params = Vec::with_capacity(2 + keys.len() + args.len());
        params.push(RedisParameter::Binary(self.sha1_hex().into_bytes()));
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
    fn sha1_matches_what_redis_computes() {
        // SHA1 of "return 1", as SCRIPT LOAD reports it.
        let script = Script { source: "return 1" };
        assert_eq!(
            script.sha1_hex(),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
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
