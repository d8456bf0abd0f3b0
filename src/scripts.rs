//! Running the Lua scripts in `lua/` by EVALSHA, with the EVAL fallback for when Redis
//! has forgotten them (a restart or `SCRIPT FLUSH` empties its script cache).

use spin_sdk::redis::{Connection, Error, RedisParameter, RedisResult};

pub struct Script {
    source: &'static str,
    sha1: &'static str,
}

// ADMISSION, PUBLISH, CLAIM, LOAD, STAGE and VIEW, from lua/*.lua, with their SHA1s (build.rs).
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

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
        for script in [ADMISSION, PUBLISH, CLAIM, LOAD, STAGE, VIEW] {
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
        for script in [ADMISSION, PUBLISH, CLAIM, LOAD, STAGE, VIEW] {
            for section in ["KEYS[1]", "ARGV", "Returns"] {
                assert!(script.source.contains(section), "missing {section}");
            }
        }
    }
}
