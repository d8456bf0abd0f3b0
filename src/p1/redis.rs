//! Runs the sale's Redis calls (`seckill_core::sale`: a type per script, with its reply)
//! on Spin's outbound Redis API.

use spin_sdk::redis::{self, Connection};

use seckill_core::redis::{is_noscript, Command, Reply};
use seckill_core::sale::Call;

pub use crate::redis_values::RedisError;
use crate::redis_values::{from_spin, parameters};

/// One request's connection to Redis.
pub struct Redis {
    connection: Connection,
}

impl Redis {
    /// Spin opens a new connection per `open`, so a request opens one and reuses it.
    pub async fn connect(url: &str) -> Result<Redis, RedisError> {
        Ok(Redis {
            connection: Connection::open(url)?,
        })
    }

    /// Runs a command: one round trip, or two for a script Redis has forgotten (the
    /// EVAL caches it again, so the next EVALSHA finds it).
    pub async fn run(&self, command: &Command) -> Result<Vec<Reply>, redis::Error> {
        command
            .send_with(
                |name, args| async move { self.connection.execute(name, &parameters(args)) },
                |error| matches!(error, redis::Error::Other(message) if is_noscript(message)),
            )
            .await
            .map(|reply| reply.into_iter().map(from_spin).collect())
    }

    /// Runs `call` and reads its reply.
    pub async fn call<C: Call>(&self, call: &C) -> Result<C::Output, RedisError> {
        Ok(call.parse(self.run(&call.command()).await?)?)
    }
}
