//! The Lua scripts in `lua/`, run against the real Redis exactly as the component calls
//! them: the same keys, arguments and replies.

use std::collections::HashSet;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Value};
use seckill_tests::backends::{fresh_voucher_id, key, redis};

const ADMISSION: &str = include_str!("../../../lua/admission.lua");
const UNLOCK: &str = include_str!("../../../lua/unlock.lua");
const LOAD: &str = include_str!("../../../lua/load.lua");
const SEQUENCE_PREFIX: &str = "seckill:order-seq";
const LONG_TTL: u64 = 60_000;

#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Admitted { seconds: i64, sequence: i64 },
    Missing,
    NotStarted,
    Ended,
    SoldOut,
    AlreadyOrdered(String),
    Busy,
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

struct Sale {
    conn: MultiplexedConnection,
    voucher: u64,
}

impl Sale {
    /// A live sale (begun a minute ago, ending in an hour) with `stock` units.
    async fn live(stock: i64) -> Sale {
        let sale = Sale {
            conn: redis().await,
            voucher: fresh_voucher_id(),
        };
        let now = sale.now_ms().await;
        sale.load(stock, now - 60_000, now + 3_600_000, &[]).await;
        sale
    }

    async fn now_ms(&self) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .unwrap();
        seconds * 1000 + micros / 1000
    }

    async fn load(&self, stock: i64, begin_ms: i64, end_ms: i64, buyers: &[(u64, &str)]) {
        let mut conn = self.conn.clone();
        let staged = key(self.voucher, "buyers:staged");
        for (user, order) in buyers {
            let _: () = conn
                .hset(&staged, user.to_string(), format!("o:{order}"))
                .await
                .unwrap();
        }
        let keys = [
            key(self.voucher, "voucher"),
            key(self.voucher, "buyers"),
            key(self.voucher, "pending"),
            staged,
        ];
        let loaded: i64 = self
            .run(
                LOAD,
                &keys,
                &[stock.to_string(), begin_ms.to_string(), end_ms.to_string()],
            )
            .await;
        assert_eq!(loaded, 1);
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> T {
        let script = redis::Script::new(source);
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(a);
        }
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .unwrap()
    }

    fn keys(&self, user: u64) -> [String; 4] {
        [
            key(self.voucher, "voucher"),
            key(self.voucher, "buyers"),
            key(self.voucher, "pending"),
            key(self.voucher, &format!("lock:{user}")),
        ]
    }

    async fn admit(&self, user: u64, token: &str, ttl_ms: u64) -> Reply {
        let mut keys = self.keys(user).to_vec();
        keys.push(SEQUENCE_PREFIX.to_string());
        let args = [user.to_string(), token.to_string(), ttl_ms.to_string()];
        let reply: Vec<Value> = self.run(ADMISSION, &keys, &args).await;
        match (text(&reply[0]).as_str(), &reply[1..]) {
            ("admitted", [seconds, sequence]) => Reply::Admitted {
                seconds: int(seconds),
                sequence: int(sequence),
            },
            ("missing", []) => Reply::Missing,
            ("not_started", []) => Reply::NotStarted,
            ("ended", []) => Reply::Ended,
            ("sold_out", []) => Reply::SoldOut,
            ("already_ordered", [id]) => Reply::AlreadyOrdered(text(id)),
            ("busy", [ms]) => {
                assert!(int(ms) > 0 && int(ms) <= LONG_TTL as i64);
                Reply::Busy
            }
            (tag, rest) => panic!("unexpected reply {tag} {rest:?}"),
        }
    }

    async fn unlock(&self, user: u64, token: &str, outcome: &str, order_id: &str) -> bool {
        let args = [
            user.to_string(),
            token.to_string(),
            outcome.to_string(),
            order_id.to_string(),
        ];
        let settled: i64 = self.run(UNLOCK, &self.keys(user), &args).await;
        settled == 1
    }

    async fn stock(&self) -> i64 {
        self.conn
            .clone()
            .hget(key(self.voucher, "voucher"), "stock")
            .await
            .unwrap()
    }

    async fn record(&self, user: u64) -> Option<String> {
        self.conn
            .clone()
            .hget(key(self.voucher, "buyers"), user.to_string())
            .await
            .unwrap()
    }

    async fn pending(&self) -> Vec<String> {
        self.conn
            .clone()
            .zrange(key(self.voucher, "pending"), 0, -1)
            .await
            .unwrap()
    }

    async fn lock(&self, user: u64) -> Option<String> {
        self.conn
            .clone()
            .get(key(self.voucher, &format!("lock:{user}")))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn stock_s_admits_exactly_s_of_many_concurrent_buyers() {
    let sale = Sale::live(20).await;
    let mut tasks = Vec::new();
    for user in 1..=300u64 {
        // One connection per caller, as each Spin instance opens its own.
        let sale = Sale {
            conn: redis().await,
            voucher: sale.voucher,
        };
        tasks.push(tokio::spawn(async move {
            sale.admit(user, &format!("t{user}"), LONG_TTL).await
        }));
    }
    let mut admitted = 0;
    let mut sequences = HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            Reply::Admitted { seconds, sequence } => {
                admitted += 1;
                assert!(
                    sequences.insert((seconds, sequence)),
                    "order id handed out twice"
                );
            }
            Reply::SoldOut => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(admitted, 20);
    assert_eq!(sale.stock().await, 0);
    assert_eq!(sale.pending().await.len(), 20);
}

#[tokio::test]
async fn one_buyer_is_admitted_at_most_once() {
    let sale = Sale::live(100).await;
    let mut tasks = Vec::new();
    for attempt in 0..40 {
        let sale = Sale {
            conn: redis().await,
            voucher: sale.voucher,
        };
        tasks.push(tokio::spawn(async move {
            sale.admit(7, &format!("t{attempt}"), LONG_TTL).await
        }));
    }
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    let admitted = replies
        .iter()
        .filter(|r| matches!(r, Reply::Admitted { .. }))
        .count();
    let busy = replies.iter().filter(|r| **r == Reply::Busy).count();
    assert_eq!((admitted, busy), (1, 39));
    assert_eq!(sale.stock().await, 99);
}

#[tokio::test]
async fn undo_restores_exactly_what_its_reservation_took() {
    let sale = Sale::live(5).await;
    for user in [1, 2, 3] {
        assert!(matches!(
            sale.admit(user, &format!("t{user}"), LONG_TTL).await,
            Reply::Admitted { .. }
        ));
    }
    assert_eq!(sale.stock().await, 2);

    // Someone else's token settles nothing, and leaves the lock alone.
    assert!(!sale.unlock(2, "t1", "undo", "").await);
    assert_eq!(sale.stock().await, 2);
    assert_eq!(sale.lock(2).await.as_deref(), Some("t2"));

    assert!(sale.unlock(2, "t2", "undo", "").await);
    assert_eq!(sale.stock().await, 3);
    assert_eq!(sale.record(2).await, None);
    assert_eq!(sale.lock(2).await, None);
    assert_eq!(sale.pending().await, vec!["1".to_string(), "3".to_string()]);

    // Idempotent: the same undo again changes nothing.
    assert!(!sale.unlock(2, "t2", "undo", "").await);
    assert_eq!(sale.stock().await, 3);

    // The buyer is free to try again.
    assert!(matches!(
        sale.admit(2, "t2b", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.stock().await, 2);
}

#[tokio::test]
async fn an_ordered_buyer_is_turned_away_with_the_order_id() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(9, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(9, "t", "ordered", "123456789012345678").await);
    assert_eq!(
        sale.record(9).await.as_deref(),
        Some("o:123456789012345678")
    );
    assert!(sale.pending().await.is_empty());
    assert_eq!(sale.lock(9).await, None);
    assert_eq!(sale.stock().await, 4);
    assert_eq!(
        sale.admit(9, "t2", LONG_TTL).await,
        Reply::AlreadyOrdered("123456789012345678".into())
    );
    assert_eq!(sale.stock().await, 4);
}

#[tokio::test]
async fn a_duplicate_in_mysql_records_the_order_and_keeps_the_unit() {
    // MySQL's order for buyer 4 took a unit that Redis had not charged to it; the unit
    // this reservation took stands for it.
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(4, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(4, "t", "duplicate", "77").await);
    assert_eq!(sale.record(4).await.as_deref(), Some("o:77"));
    assert_eq!(sale.stock().await, 4);
    assert!(sale.pending().await.is_empty());
}

#[tokio::test]
async fn sold_out_in_mysql_drops_the_reservation_and_zeroes_redis_stock() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(4, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(4, "t", "sold_out", "").await);
    assert_eq!(sale.record(4).await, None);
    assert_eq!(sale.stock().await, 0);
    assert_eq!(sale.admit(5, "t5", LONG_TTL).await, Reply::SoldOut);
}

#[tokio::test]
async fn the_sale_window_follows_redis_time() {
    let sale = Sale::live(5).await;
    let now = sale.now_ms().await;
    sale.load(5, now + 60_000, now + 120_000, &[]).await;
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::NotStarted);
    sale.load(5, now - 120_000, now - 60_000, &[]).await;
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::Ended);
    assert_eq!(sale.stock().await, 5);
    assert_eq!(sale.record(1).await, None);
}

#[tokio::test]
async fn an_unknown_voucher_is_missing() {
    let sale = Sale {
        conn: redis().await,
        voucher: fresh_voucher_id(),
    };
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::Missing);
    assert_eq!(sale.record(1).await, None);
}

#[tokio::test]
async fn an_expired_attempt_is_taken_over_by_the_buyers_next_one() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(3, "old", 200).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.admit(3, "new", 200).await, Reply::Busy);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        sale.admit(3, "new", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    // The takeover reuses the unit: stock went down once.
    assert_eq!(sale.stock().await, 4);
    // The old attempt, finishing late, no longer owns anything.
    assert!(!sale.unlock(3, "old", "undo", "").await);
    assert_eq!(sale.stock().await, 4);
    assert_eq!(sale.lock(3).await.as_deref(), Some("new"));
}

#[tokio::test]
async fn an_abandoned_unit_is_reclaimed_once_stock_runs_out() {
    let sale = Sale::live(1).await;
    assert!(matches!(
        sale.admit(1, "a", 200).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.admit(2, "b", LONG_TTL).await, Reply::SoldOut);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        sale.admit(2, "b", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.stock().await, 0);
    assert_eq!(sale.record(1).await, None);
    assert_eq!(sale.pending().await, vec!["2".to_string()]);
    // The first buyer's late undo must not hand out the unit a second time.
    assert!(!sale.unlock(1, "a", "undo", "").await);
    assert_eq!(sale.stock().await, 0);
    // If it did commit after all, MySQL holds the order and Redis records it.
    assert!(!sale.unlock(1, "a", "ordered", "55").await);
    assert_eq!(sale.record(1).await.as_deref(), Some("o:55"));
    assert_eq!(sale.record(2).await.as_deref(), Some("p:b"));
}

#[tokio::test]
async fn load_installs_buyers_and_clears_reservations() {
    let sale = Sale::live(10).await;
    assert!(matches!(
        sale.admit(1, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    let now = sale.now_ms().await;
    sale.load(8, now - 1000, now + 60_000, &[(5, "500"), (6, "600")])
        .await;
    assert_eq!(sale.stock().await, 8);
    assert_eq!(sale.record(1).await, None);
    assert!(sale.pending().await.is_empty());
    assert_eq!(
        sale.admit(5, "t", LONG_TTL).await,
        Reply::AlreadyOrdered("500".into())
    );
    let staged: bool = sale
        .conn
        .clone()
        .exists(key(sale.voucher, "buyers:staged"))
        .await
        .unwrap();
    assert!(!staged);
}

#[tokio::test]
async fn a_lost_sequence_key_restarts_above_the_numbers_already_used() {
    let sale = Sale::live(10).await;
    let Reply::Admitted {
        seconds,
        sequence: first,
    } = sale.admit(1, "a", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    let Reply::Admitted {
        sequence: second, ..
    } = sale.admit(2, "b", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    // The day's sequence is global: tests running beside this one admit buyers too.
    assert!(second > first, "{second} <= {first}");
    assert!(first < 1 << 32 && second < 1 << 32);
    // As after a Redis restart without persistence: the day's key is gone.
    let day_key = format!("{SEQUENCE_PREFIX}:{}", seconds / 86_400);
    let _: () = sale.conn.clone().del(&day_key).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let Reply::Admitted {
        sequence: third, ..
    } = sale.admit(3, "c", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    assert!(
        third > second,
        "{third} <= {second}: a restart would reuse order ids"
    );
    let ttl: i64 = sale.conn.clone().ttl(&day_key).await.unwrap();
    assert!(ttl > 86_400);
}

#[tokio::test]
async fn evalsha_needs_the_eval_fallback_after_a_script_flush() {
    // Shows what the component's fallback (src/scripts.rs) is for; the end-to-end tests
    // check the component itself recovers.
    let mut conn = redis().await;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 42")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let error = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(0)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("NOSCRIPT"));
}
