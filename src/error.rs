//! How the component's backends fail to a client: as a plain 503 whose detail goes to the
//! request log. The errors a client can see, with their statuses, are
//! `seckill_core::ApiError`.

use seckill_core::ApiError;

use crate::db::DbError;
use crate::request_log;
use crate::sale::SaleError;

impl From<SaleError> for ApiError {
    fn from(error: SaleError) -> ApiError {
        request_log::note_cause(&error);
        match error {
            SaleError::SyncInProgress => ApiError::SyncInProgress,
            SaleError::SyncLost => {
                ApiError::Unavailable("the sync was interrupted; run it again".into())
            }
            _ => ApiError::Unavailable("redis".into()),
        }
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> ApiError {
        request_log::note_cause(&error);
        ApiError::Unavailable("mysql".into())
    }
}
