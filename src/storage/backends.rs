//! A request's Redis and MySQL as the state machines' port (`seckill_core::drive`): the
//! Redis connection the request opened, and MySQL's, opened when first asked for (a
//! purchase decided by Redis alone never opens one) or the one the request already has.

use seckill_core::drive::Backend;
use seckill_core::ledger::Returned;
use seckill_core::purchase::Lookup;
use seckill_core::redis::{Command, Reply};
use seckill_core::sale::Record;
use seckill_core::verdict::{Committed, Committing};
use seckill_core::{BackendError, BucketId, OrderId, UserId};

use crate::config;
use crate::error::Failure;
use crate::storage::db::Db;
use crate::storage::redis::Redis;

/// MySQL at the settings' `mysql_url`: where every handler opens it.
pub async fn open_mysql() -> Result<Db, Failure> {
    Ok(Db::connect(&config::mysql_url()?).await?)
}

/// Redis (or the Redis Cluster) as the settings name it: where every handler opens it.
pub async fn open_redis() -> Result<Redis, Failure> {
    Ok(Redis::connect(config::redis_target()?).await?)
}

/// The request's connections.
pub struct Backends<'a> {
    redis: &'a Redis,
    db: Mysql<'a>,
}

/// MySQL's connection: the request's own, or one this opens on first use and drops after
/// a failed commit, so that the retry runs on a fresh one.
enum Mysql<'a> {
    Given(&'a Db),
    Opened(&'a mut Option<Db>),
}

impl<'a> Backends<'a> {
    /// On `redis`, with MySQL opened into `db` when first needed (and kept there for the
    /// request's next run).
    pub fn new(redis: &'a Redis, db: &'a mut Option<Db>) -> Backends<'a> {
        Backends {
            redis,
            db: Mysql::Opened(db),
        }
    }

    /// On connections the request already has.
    pub fn with(redis: &'a Redis, db: &'a Db) -> Backends<'a> {
        Backends {
            redis,
            db: Mysql::Given(db),
        }
    }

    async fn mysql(&mut self) -> Result<&Db, BackendError> {
        match &mut self.db {
            Mysql::Given(db) => Ok(db),
            Mysql::Opened(slot) => {
                if slot.is_none() {
                    let url = config::mysql_url()
                        .map_err(|error| BackendError::Mysql(error.to_string()))?;
                    let db = Db::connect(&url).await?;
                    **slot = Some(db);
                }
                Ok(slot.as_ref().expect("just opened"))
            }
        }
    }
}

impl Backend for Backends<'_> {
    async fn redis(&mut self, command: &Command) -> Result<Vec<Reply>, BackendError> {
        self.redis
            .run(command)
            .await
            .map_err(|error| BackendError::Redis(error.to_string()))
    }

    async fn commit(
        &mut self,
        voucher_id: BucketId,
        batch: &[Committing],
    ) -> Result<Committed, BackendError> {
        let committed = self.mysql().await?.commit_batch(voucher_id, batch).await;
        if committed.is_err() {
            if let Mysql::Opened(slot) = &mut self.db {
                **slot = None;
            }
        }
        Ok(committed?)
    }

    async fn lookup(&mut self, voucher_id: BucketId) -> Result<Lookup, BackendError> {
        Ok(self.mysql().await?.lookup(voucher_id).await?)
    }

    async fn expire_due(
        &mut self,
        voucher_id: BucketId,
        limit: u32,
    ) -> Result<(usize, Option<i64>), BackendError> {
        Ok(self.mysql().await?.expire_due(voucher_id, limit).await?)
    }

    async fn returns_after(
        &mut self,
        voucher_id: BucketId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Returned>, BackendError> {
        let db = self.mysql().await?;
        Ok(db.returns_after(voucher_id, after, limit).await?)
    }

    async fn buyers_page(
        &mut self,
        voucher_id: BucketId,
        after: OrderId,
        limit: u32,
    ) -> Result<Vec<(UserId, Record)>, BackendError> {
        let db = self.mysql().await?;
        Ok(db.buyers_page(voucher_id, after, limit).await?)
    }
}
