//! What both builds' Redis adapters (`p1::node`, `p3::node`) share: Spin's Redis values
//! and errors, alike in both SDKs, as the decisions' plain values, and a command's run on
//! a server's connection.

use std::future::Future;

use spin_sdk::redis::{self, RedisParameter, RedisResult};

use seckill_core::redis::{is_noscript, Arg, Command, Reply, UnexpectedReply};
use seckill_core::BackendError;

use crate::error::Failure;

#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error("redis: {0}")]
    Redis(#[from] redis::Error),
    #[error(transparent)]
    Reply(#[from] UnexpectedReply),
}

/// A Redis call's failure as the state machines take it (`seckill_core::drive`).
impl From<RedisError> for BackendError {
    fn from(error: RedisError) -> BackendError {
        match error {
            RedisError::Redis(error) => BackendError::Redis(error.to_string()),
            RedisError::Reply(unexpected) => BackendError::UnexpectedReply(unexpected),
        }
    }
}

/// A handler's Redis call failed: its request answers `503`, naming Redis.
impl From<RedisError> for Failure {
    fn from(error: RedisError) -> Failure {
        Failure::Backend(error.into())
    }
}

/// Runs `command` through `send` (one command on a server's connection): one round trip,
/// or two for a script Redis has forgotten (the EVAL caches it again, so the next EVALSHA
/// finds it); each after `ASKING` when `asking`.
pub async fn execute<Sent>(
    command: &Command,
    asking: bool,
    send: impl Fn(&'static str, Vec<RedisParameter>) -> Sent,
) -> Result<Vec<Reply>, redis::Error>
where
    Sent: Future<Output = Result<Vec<RedisResult>, redis::Error>>,
{
    let send = &send;
    command
        .send_with(
            |name, args| async move {
                if asking {
                    send("ASKING", Vec::new()).await?;
                }
                send(name, parameters(args)).await
            },
            |error| matches!(error, redis::Error::Other(message) if is_noscript(message)),
        )
        .await
        .map(|reply| reply.into_iter().map(from_spin).collect())
}

fn parameters(args: Vec<Arg>) -> Vec<RedisParameter> {
    args.into_iter()
        .map(|arg| match arg {
            Arg::Int(n) => RedisParameter::Int64(n),
            Arg::Text(text) => RedisParameter::Binary(text.into_bytes()),
        })
        .collect()
}

fn from_spin(value: RedisResult) -> Reply {
    match value {
        RedisResult::Nil => Reply::Nil,
        RedisResult::Status(status) => Reply::Status(status),
        RedisResult::Int64(n) => Reply::Int(n),
        RedisResult::Binary(bytes) => Reply::Bytes(bytes),
    }
}
