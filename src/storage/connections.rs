//! A request's Redis and MySQL: its [`Connections`], each opened when first asked for, and
//! the state machines' port on them (`seckill_core::drive`): the Redis connection the
//! request opened, and MySQL's, opened when first asked for (a purchase decided by Redis
//! alone never opens one) or the one the request already has.

use std::cell::OnceCell;

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

/// MySQL at the settings' `mysql_url`.
async fn open_mysql() -> Result<Db, Failure> {
    Ok(Db::connect(&config::mysql_url()?).await?)
}

/// Redis (or the Redis Cluster) as the settings name it.
async fn open_redis() -> Result<Redis, Failure> {
    Ok(Redis::connect(config::redis_target()?).await?)
}

/// A request's connections, which the router hands to its handler: each backend is opened
/// when the handler first asks for it and kept for the rest of the request, so that a
/// request holds one connection to each at most, and none to a backend it does not use.
/// A failed opening is tried again at the next ask.
#[derive(Default)]
pub struct Connections {
    redis: OnceCell<Redis>,
    db: OnceCell<Db>,
}

impl Connections {
    /// Redis, opened now if the request has not yet.
    pub async fn redis(&self) -> Result<&Redis, Failure> {
        if self.redis.get().is_none() {
            let redis = open_redis().await?;
            let _ = self.redis.set(redis);
        }
        Ok(self.redis.get().expect("just opened"))
    }

    /// MySQL, opened now if the request has not yet.
    pub async fn mysql(&self) -> Result<&Db, Failure> {
        if self.db.get().is_none() {
            let db = open_mysql().await?;
            let _ = self.db.set(db);
        }
        Ok(self.db.get().expect("just opened"))
    }

    /// The machines' port on the request's Redis (opened now if not yet), with MySQL
    /// opened when a machine first needs it and dropped after a failed commit
    /// ([`Port`]).
    pub async fn port(&mut self) -> Result<Port<'_>, Failure> {
        self.redis().await?;
        Ok(Port {
            redis: self.redis.get().expect("just opened"),
            db: Mysql::Opened(&mut self.db),
        })
    }
}

/// The state machines' port (`seckill_core::drive::Backend`) on the request's connections.
pub struct Port<'a> {
    redis: &'a Redis,
    db: Mysql<'a>,
}

/// MySQL's connection: the request's own, or one this opens on first use and drops after
/// a failed commit, so that the retry runs on a fresh one.
enum Mysql<'a> {
    Given(&'a Db),
    Opened(&'a mut OnceCell<Db>),
}

impl<'a> Port<'a> {
    /// On connections the request already has.
    pub fn with(redis: &'a Redis, db: &'a Db) -> Port<'a> {
        Port {
            redis,
            db: Mysql::Given(db),
        }
    }

    async fn mysql(&mut self) -> Result<&Db, BackendError> {
        match &mut self.db {
            Mysql::Given(db) => Ok(db),
            Mysql::Opened(slot) => {
                if slot.get().is_none() {
                    let url = config::mysql_url()
                        .map_err(|error| BackendError::Mysql(error.to_string()))?;
                    let db = Db::connect(&url).await?;
                    let _ = slot.set(db);
                }
                Ok(slot.get().expect("just opened"))
            }
        }
    }
}

impl Backend for Port<'_> {
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
                slot.take();
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
