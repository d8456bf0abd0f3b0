//! How a request fails: [`Failure`], either an answer a client can see
//! (`seckill_core::ApiError`, with its status) or a backend that failed, with its error
//! as the source. The request's end (`src/lib.rs`) answers a backend's failure with a
//! plain `503` naming the backend, and writes its cause to the request log, once.

use seckill_core::{ApiError, BackendError, Unavailable};

#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("encoding the answer: {0}")]
    Encoding(#[source] serde_json::Error),
    /// What a state machine of `seckill_core` met (`drive`).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl Failure {
    /// What the client is told.
    pub fn api(&self) -> ApiError {
        match self {
            Failure::Api(error) => error.clone(),
            Failure::Encoding(_) => ApiError::Unavailable(Unavailable::Encoding),
            Failure::Backend(error) => ApiError::Unavailable(error.unavailable()),
        }
    }

    /// What the request log keeps of a backend's failure.
    pub fn cause(&self) -> Option<String> {
        match self {
            Failure::Api(_) => None,
            failure => Some(failure.to_string()),
        }
    }
}
