//! How the component's backends fail to a client: as a plain 503 whose detail goes to the
//! request log. The errors a client can see, with their statuses, are
//! `seckill_core::ApiError`.

use seckill_core::ApiError;

use crate::db::DbError;
use crate::redis::RedisError;
use crate::request_log;

impl From<RedisError> for ApiError {
    fn from(error: RedisError) -> ApiError {
        request_log::note_cause(&error);
        ApiError::Unavailable("redis".into())
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> ApiError {
        request_log::note_cause(&error);
        ApiError::Unavailable("mysql".into())
    }
}
