//! What both builds' Redis adapters (`p1::node`, `p3::node`) share: Spin's Redis values
//! and errors, alike in both SDKs, as the decisions' plain values.

use spin_sdk::redis::{self, RedisParameter, RedisResult};

use seckill_core::redis::{Arg, Reply, UnexpectedReply};
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

pub fn parameters(args: Vec<Arg>) -> Vec<RedisParameter> {
    args.into_iter()
        .map(|arg| match arg {
            Arg::Int(n) => RedisParameter::Int64(n),
            Arg::Text(text) => RedisParameter::Binary(text.into_bytes()),
        })
        .collect()
}

pub fn from_spin(value: RedisResult) -> Reply {
    match value {
        RedisResult::Nil => Reply::Nil,
        RedisResult::Status(status) => Reply::Status(status),
        RedisResult::Int64(n) => Reply::Int(n),
        RedisResult::Binary(bytes) => Reply::Bytes(bytes),
    }
}
