//! The decisions of seckill in plain Rust, with no Spin in them: ids, the Redis keys and
//! script calls and what their replies mean, MySQL's verdicts, the errors a client sees,
//! and a purchase as a state machine that says which I/O it needs next. The component
//! runs them on Spin; the tests run the same code on servers of their own, so what is
//! tested is what ships.
//!
//! From the bottom up: `ids` and `order_id`; `error`, `redis`, `redis_cluster` (slots and
//! redirects, and where a command goes next on a cluster), `verdict` and
//! `outcomes` (the purchase outcomes the metrics count); `buckets` (a hot sale's stock
//! over several slots); `sale` (keys, and a file per script with its call and reply) and
//! `sql` (statements and their rows); `purchase`, `returns` and `sync` (the requests that
//! change a sale, as state machines); `drive` (the one driver of those machines, and the
//! port their I/O goes through).

pub mod buckets;
pub mod drive;
pub mod error;
pub mod ids;
pub mod ledger;
pub mod line;
pub mod lookup;
pub mod order_id;
pub mod outcomes;
pub mod purchase;
pub mod redis;
pub mod redis_cluster;
pub mod returns;
pub mod sale;
pub mod sql;
pub mod sync;
pub mod verdict;

pub use error::{ApiError, BackendError, Unavailable};
pub use ids::{parse_id, BucketId, SaleId, UserId, VoucherId};
pub use order_id::OrderId;
