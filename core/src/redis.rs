//! Redis as the decisions see it: the commands they need run and the replies they read,
//! as plain values. Whoever holds a connection runs them: the component through Spin's
//! outbound Redis API, the tests through a Redis client of their own.

use std::fmt;

/// A Lua script of `lua/`, with its SHA1 for EVALSHA.
#[derive(Debug, PartialEq, Eq)]
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub sha1: &'static str,
}

// ADMISSION, PUBLISH, UNLOCK, CLAIM, LOAD, STAGE, VIEW, RECORD, RESTOCK, END, METRICS, COUNT,
// PROBED, AUDIT, HEAL, ASK_MYSQL, RAISE, WALK_END, CLEAR, END_TURN, END_SWEEP, REOPEN, LEAVE and CHANGE, from lua/*.lua, with their
// SHA1s (build.rs): a fresh instance per request would otherwise hash them every time.
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

/// One argument of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Int(i64),
    Text(String),
}

impl From<&str> for Arg {
    fn from(text: &str) -> Arg {
        Arg::Text(text.to_string())
    }
}

impl From<String> for Arg {
    fn from(text: String) -> Arg {
        Arg::Text(text)
    }
}

impl From<i64> for Arg {
    fn from(n: i64) -> Arg {
        Arg::Int(n)
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Int(n) => n.fmt(f),
            Arg::Text(text) => text.fmt(f),
        }
    }
}

/// A script's arguments, each under the name its script's header gives it (`-- ARGV[i]
/// name ...`), in the header's order: the names travel with the command, so that the
/// contract test (core/src/sale/contracts.rs) holds them against the header and a swap
/// fails it. Redis receives the values only, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args(Vec<(&'static str, Arg)>);

/// A script's [`Args`], each named where it is built: `args![user = id, lease_ms = 500]`.
#[macro_export]
macro_rules! args {
    ($($name:ident = $value:expr),* $(,)?) => {
        $crate::redis::Args::new()$(.arg(stringify!($name), $value))*
    };
}
pub use crate::args;

impl Args {
    pub fn new() -> Args {
        Args(Vec::new())
    }

    /// These arguments and then `value`, named `name`.
    pub fn arg(mut self, name: &'static str, value: impl Into<Arg>) -> Args {
        self.0.push((name, value.into()));
        self
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().map(|(name, _)| *name)
    }

    /// The values, in order: what Redis receives.
    pub fn values(&self) -> impl Iterator<Item = &Arg> {
        self.0.iter().map(|(_, value)| value)
    }

    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<&Arg> {
        self.0
            .iter()
            .find(|(named, _)| *named == name)
            .map(|(_, value)| value)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each name with its value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Arg)> {
        self.0.iter().map(|(name, value)| (*name, value))
    }
}

impl FromIterator<(&'static str, Arg)> for Args {
    fn from_iter<I: IntoIterator<Item = (&'static str, Arg)>>(iter: I) -> Args {
        Args(iter.into_iter().collect())
    }
}

/// A command for Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A script of `lua/`: EVALSHA, and EVAL when Redis has forgotten it (a restart or
    /// `SCRIPT FLUSH` empties its script cache).
    Script {
        script: &'static Script,
        keys: Vec<String>,
        args: Args,
    },
    /// Any other command, by name.
    Plain { name: &'static str, args: Vec<Arg> },
}

impl Command {
    pub fn script(script: &'static Script, keys: Vec<String>, args: Args) -> Command {
        Command::Script { script, keys, args }
    }

    pub fn plain(name: &'static str, args: Vec<Arg>) -> Command {
        Command::Plain { name, args }
    }

    /// The command's name and arguments, as sent: EVALSHA for a script.
    pub fn parts(&self) -> (&'static str, Vec<Arg>) {
        match self {
            Command::Script { script, keys, args } => {
                let mut parts = Vec::with_capacity(2 + keys.len() + args.len());
                parts.push(Arg::from(script.sha1));
                parts.push(Arg::Int(keys.len() as i64));
                parts.extend(keys.iter().map(|key| Arg::from(key.as_str())));
                parts.extend(args.values().cloned());
                ("EVALSHA", parts)
            }
            Command::Plain { name, args } => (name, args.clone()),
        }
    }

    /// The key a Redis Cluster routes the command by: a script's first (all of a script's
    /// keys share a slot), a plain command's first argument; `None` for a command about
    /// the server itself (`PING`), which any node answers.
    pub fn key(&self) -> Option<&str> {
        match self {
            Command::Script { keys, .. } => keys.first().map(String::as_str),
            Command::Plain { name, .. } if ["PING", "TIME", "INFO"].contains(name) => None,
            Command::Plain { args, .. } => match args.first() {
                Some(Arg::Text(key)) => Some(key),
                _ => None,
            },
        }
    }

    /// Whether the command may hold its connection while it waits (`BLPOP` and its
    /// kin): nothing else can be sent on that connection meanwhile.
    pub fn blocks(&self) -> bool {
        match self {
            Command::Plain { name, .. } => [
                "BLPOP", "BRPOP", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "XREAD",
            ]
            .contains(name),
            Command::Script { .. } => false,
        }
    }

    /// Sends the command through `send` (a client's one round trip), once; a script Redis
    /// has forgotten (`noscript` says which error that is) a second time, by EVAL, which
    /// caches it again for the next EVALSHA. Every client of the project sends this way.
    pub async fn send_with<T, E, Sent>(
        &self,
        mut send: impl FnMut(&'static str, Vec<Arg>) -> Sent,
        noscript: impl Fn(&E) -> bool,
    ) -> Result<T, E>
    where
        Sent: std::future::Future<Output = Result<T, E>>,
    {
        let (name, args) = self.parts();
        match send(name, args).await {
            Err(error) if noscript(&error) => match self.eval_fallback() {
                Some((name, args)) => send(name, args).await,
                None => Err(error),
            },
            result => result,
        }
    }

    /// The EVAL to send instead when Redis answered the EVALSHA with NOSCRIPT.
    fn eval_fallback(&self) -> Option<(&'static str, Vec<Arg>)> {
        match self {
            Command::Script { script, .. } => {
                let (_, mut parts) = self.parts();
                parts[0] = Arg::from(script.source);
                Some(("EVAL", parts))
            }
            Command::Plain { .. } => None,
        }
    }
}

/// One value of a reply, as Spin hands them over: an array reply arrives as its
/// elements, one level deep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Status(String),
    Int(i64),
    Bytes(Vec<u8>),
}

impl Reply {
    pub fn text(value: &str) -> Reply {
        Reply::Bytes(value.as_bytes().to_vec())
    }

    pub fn is_tag(&self, tag: &str) -> bool {
        matches!(self, Reply::Bytes(bytes) if bytes == tag.as_bytes())
    }
}

/// A reply the decisions do not understand: only a Redis written by something else, or
/// scripts of another version, give one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redis: unexpected reply {0:?}")]
pub struct UnexpectedReply(pub Vec<Reply>);

/// Whether a Redis error is NOSCRIPT: depending on the host's Redis client it reads
/// "NOSCRIPT ..." or "NoScriptError: ...".
pub fn is_noscript(message: &str) -> bool {
    message.to_ascii_lowercase().contains("noscript")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [&Script; 24] = [
        &ADMISSION, &PUBLISH, &UNLOCK, &CLAIM, &LOAD, &STAGE, &VIEW, &RECORD, &RESTOCK, &END,
        &METRICS, &COUNT, &PROBED, &AUDIT, &HEAL, &ASK_MYSQL, &RAISE, &WALK_END, &CLEAR, &END_TURN,
        &END_SWEEP, &REOPEN, &LEAVE, &CHANGE,
    ];

    #[test]
    fn each_sha1_is_the_hash_of_its_script() {
        use sha1::{Digest, Sha1};
        for script in ALL {
            let hex: String = Sha1::digest(script.source.as_bytes())
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            assert_eq!(script.sha1, hex, "{}", script.name);
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
        for script in ALL {
            for section in ["KEYS[1]", "ARGV", "Returns"] {
                assert!(
                    script.source.contains(section),
                    "{}: {section}",
                    script.name
                );
            }
        }
    }

    #[test]
    fn a_script_runs_by_its_sha1_and_falls_back_to_its_source() {
        let command = Command::script(&VIEW, vec!["k".into()], args![n = 5]);
        let (name, parts) = command.parts();
        assert_eq!(name, "EVALSHA");
        assert_eq!(
            parts,
            [
                Arg::from(VIEW.sha1),
                Arg::Int(1),
                Arg::from("k"),
                Arg::Int(5)
            ]
        );
        let (name, parts) = command.eval_fallback().unwrap();
        assert_eq!((name, &parts[0]), ("EVAL", &Arg::from(VIEW.source)));
        assert_eq!(Command::plain("PING", vec![]).eval_fallback(), None);
    }

    #[test]
    fn a_command_is_routed_by_its_first_key() {
        let script = Command::script(&VIEW, vec!["{1}:a".into(), "{1}:b".into()], args![]);
        assert_eq!(script.key(), Some("{1}:a"));
        let get = Command::plain("GET", vec![Arg::from("k"), Arg::Int(1)]);
        assert_eq!(get.key(), Some("k"));
        assert_eq!(Command::plain("PING", vec![]).key(), None);
    }

    #[test]
    fn only_waiting_commands_block_their_connection() {
        assert!(Command::plain("BLPOP", vec![Arg::from("q"), Arg::Int(1)]).blocks());
        assert!(!Command::plain("PING", vec![]).blocks());
        assert!(!Command::script(&CLAIM, vec!["k".into()], args![]).blocks());
    }
}
