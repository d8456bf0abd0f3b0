//! The group commit's scripts at the moments the schedule explorer reaches only by
//! chance: a queued buyer pressing again, a drainer dying or stuck in MySQL, a waiter
//! handed the lease after a sync, a purchase committed after a sync read MySQL, a lost
//! voucher among loaded ones, a drainer that gives up.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;

use seckill_core::purchase::{Input, Io, Receipt};
use seckill_core::returns;
use seckill_core::sale::{
    Admission, Call, Claim, Decision, Entry, Installer, Lease, Limits, Next, Record, Ticket, Wait,
    BATCH, MAX_QUEUED,
};
use seckill_core::verdict::Verdict;
use seckill_core::{BackendError, OrderId, UserId};
use seckill_tests::drivers::purchases::InFlight;
use seckill_tests::drivers::scripts::{self, entry, outcome, published, RowLock, Sale};
use seckill_tests::servers::faults::{Persistence, RedisServer};

use super::shared::{plain, terms_at};

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// MySQL's verdicts on the queued purchases `batch`, committed as a drainer commits them.
async fn commit(sale: &Sale, batch: &[Entry]) -> Vec<Verdict> {
    scripts::commit_batch(sale.voucher, &scripts::orders_of(batch))
        .await
        .unwrap()
        .verdicts
}

/// An admin's sync of a sale that ends in an hour, from MySQL's orders `buyers` and its
/// `stock` of `initial_stock` units.
async fn sync(sale: &Sale, buyers: &[(UserId, OrderId)], stock: u64, initial_stock: u64) {
    assert!(sale.begin_load("sync").await.unwrap());
    assert!(sale.stage_buyers("sync", buyers).await.unwrap());
    let terms = terms_at(sale.now_ms().await, 3_600_000, stock, initial_stock);
    assert!(sale
        .finish_load(Installer::Sync("sync"), &terms)
        .await
        .unwrap());
}

fn order_id(ticket: Ticket) -> OrderId {
    ticket
        .order_id()
        .expect("admission hands out valid tickets")
}

/// A buyer is never told a final `sold_out` while her earlier purchase can still commit:
/// a queued buyer pressing again hears `queued` (the component answers `busy`), whatever
/// Redis's stock and however full the queue, and her purchase then commits and is hers.
#[tokio::test]
async fn a_queued_buyer_pressing_again_is_never_told_sold_out() {
    let sale = Sale::live(1).await;

    // Buyer 1 takes the last unit; her request holds the lease, its CALL not yet run.
    let first = sale.admit(user(1)).await;
    let entry = entry(user(1), &first);
    let ticket = entry.ticket;
    assert_eq!(first.decision, Decision::Admitted(ticket));
    assert_eq!(
        first.lease,
        Some(Lease {
            token: entry.to_string(),
            batch: vec![entry],
        })
    );
    let sold_out = plain(Decision::SoldOut);
    assert_eq!(sale.admit(user(2)).await, sold_out);

    let queued = plain(Decision::Queued(ticket));
    for stock in [0, -3, 1, 7, 0] {
        sale.voucher_set("stock", stock).await;
        for max_queued in [MAX_QUEUED, 1] {
            let limits = Limits {
                batch: BATCH,
                max_queued,
                ..Limits::SHIPPED
            };
            let again = sale.try_admit_limited(user(1), limits).await.unwrap();
            assert_eq!(
                again, queued,
                "Redis stock {stock}, queue limit {max_queued}"
            );
        }
    }
    assert_eq!(sale.stock().await, Some(0), "a second press took a unit");
    assert_eq!(sale.queue().await, vec![entry]);

    // Her earlier attempt commits, and her next press hears it.
    let order_id = order_id(ticket);
    let verdicts = commit(&sale, &[entry]).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    let batch = published(&[entry], &verdicts);
    let next = sale.publish(&entry.to_string(), Some(entry), &batch).await;
    assert_eq!(next.unwrap(), Next::Done);
    assert_eq!(
        sale.admit(user(1)).await.decision,
        Decision::AlreadyOrdered(order_id)
    );
    // MySQL counted no orders (an empty ledger): her press took the sweep due at once.
    let behind_a_sweep = Admission {
        sweeping: true,
        ..sold_out
    };
    assert_eq!(sale.admit(user(2)).await, behind_a_sweep);
}

/// The same when the request that held her purchase died before its CALL: once its lease
/// lapses, her next press is handed the queue and commits her purchase (the component
/// answers `already_ordered` with its id), and the news waits for the request she may
/// still have waiting.
#[tokio::test]
async fn a_queued_buyer_s_next_press_commits_her_purchase_after_its_drainer_died() {
    let sale = Sale::live(1).await;
    let first = sale.admit(user(1)).await;
    let entry = entry(user(1), &first);
    assert_eq!(sale.admit(user(2)).await.decision, Decision::SoldOut);

    sale.expire_lease().await;
    let again = sale.admit(user(1)).await;
    assert_eq!(again.decision, Decision::Queued(entry.ticket));
    let Lease { token, batch } = again.lease.expect("the free lease goes to her press");
    assert!(token.starts_with("r:"), "{token}");
    assert_eq!(batch, vec![entry]);
    let order_id = order_id(entry.ticket);
    let verdicts = commit(&sale, &[entry]).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    let batch = published(&[entry], &verdicts);
    let next = sale.publish(&token, None, &batch).await;
    assert_eq!(next.unwrap(), Next::Done);
    assert_eq!(
        sale.news(entry).await,
        vec![outcome(Verdict::Ordered, order_id)]
    );
    assert_eq!(
        sale.record(user(1)).await,
        Some(Record::Ordered(order_id, 1))
    );
    assert_eq!(sale.lease().await, None);
    assert_eq!(sale.admit(user(2)).await.decision, Decision::SoldOut);
}

/// Admission decides without waiting on MySQL: while a transaction holds the voucher's
/// stock row (a stuck MySQL: every batch of the voucher blocks on it), every buyer is
/// decided at once, admitted or sold out, never throttled or left waiting; the queued
/// purchases stay queued and commit, once each, when MySQL comes back.
#[tokio::test]
async fn admission_decides_while_mysql_is_stuck() {
    const STOCK: u64 = 5;
    const CROWD: u64 = 40;
    let sale = Sale::live(STOCK).await;
    let voucher = sale.voucher;

    let holder = RowLock::hold(voucher).await;

    // A lone buyer drains her own batch of one; its CALL blocks on the row (and gives up
    // after the procedure's lock wait, within its lease).
    let first = sale.admit(user(1)).await;
    let Lease { token, batch } = first.lease.clone().expect("a lone buyer drains");
    let own = entry(user(1), &first);
    let stuck = tokio::spawn(async move {
        scripts::commit_batch(voucher, &[(order_id(own.ticket), own.user)]).await
    });

    // A crowd, each on her own connection, as Spin instances are.
    let mut presses = Vec::new();
    for raw in 2..2 + CROWD {
        let sale = sale.another_connection().await;
        presses.push(tokio::spawn(async move {
            (user(raw), sale.admit(user(raw)).await)
        }));
    }
    let mut admitted = vec![own];
    let mut sold_out = 0;
    for press in presses {
        let (user, admission) = press.await.unwrap();
        assert_eq!(admission.lease, None, "the lease is held: {admission:?}");
        match admission.decision {
            Decision::Admitted(ticket) => admitted.push(Entry { user, ticket }),
            Decision::SoldOut => sold_out += 1,
            other => panic!("buyer {user}: {other:?} while MySQL is stuck"),
        }
    }
    assert_eq!((admitted.len() as u64, sold_out), (STOCK, CROWD - 4));
    // Pressing again changes nothing and still waits on nothing.
    for entry in &admitted {
        let again = sale.admit(entry.user).await;
        assert_eq!(again.decision, Decision::Queued(entry.ticket));
    }
    let (mysql_stock, orders): (u64, u64) = scripts::connect()
        .await
        .unwrap()
        .exec_first(
            "SELECT stock, (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) \
             FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher.raw(), voucher.raw()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((mysql_stock, orders), (STOCK, 0));

    // MySQL comes back. The stuck drainer commits its batch, or gave up waiting for the
    // row: either way its lease lapses, and the next press carries the queue on,
    // whatever it is told.
    holder.release().await;
    let purchases = scripts::orders_of(&admitted);
    let expected = vec![Verdict::Ordered; admitted.len()];
    match stuck.await.unwrap() {
        Ok(committed) => assert_eq!(committed.verdicts, expected[..1]),
        Err(mysql_async::Error::Server(error)) if error.code == 1205 => {}
        Err(error) => panic!("the stuck CALL: {error}"),
    }
    sale.expire_lease().await;
    let rescue = sale.admit(user(500)).await;
    assert_eq!(rescue.decision, Decision::SoldOut);
    let Lease {
        token: rescuer,
        batch: queue,
    } = rescue.lease.expect("the free lease goes to the press");
    assert_eq!(queue, admitted);
    let committed = scripts::commit_batch(voucher, &purchases).await.unwrap();
    assert_eq!(committed.verdicts, expected, "each order committed once");
    let verdicts = published(&admitted, &committed.verdicts);
    let late = sale.publish(&token, Some(own), &verdicts[..1]).await;
    assert_eq!(late.unwrap(), Next::Lost, "the lapsed drainer published");
    assert_eq!(batch, admitted[..1]);
    let done = sale.publish(&rescuer, None, &verdicts).await;
    assert_eq!(done.unwrap(), Next::Done);
    for entry in &admitted {
        let order_id = order_id(entry.ticket);
        assert_eq!(
            sale.record(entry.user).await,
            Some(Record::Ordered(order_id, 1))
        );
        assert_eq!(
            sale.news(*entry).await,
            vec![outcome(Verdict::Ordered, order_id)]
        );
    }
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.lease().await, None);
    let record = seckill_tests::drivers::invariants::read(voucher.raw()).await;
    let ours: HashMap<u64, u64> = purchases
        .iter()
        .map(|(order_id, user, _)| (order_id.raw(), user.raw()))
        .collect();
    assert_eq!(record.orders, ours);
    assert_eq!((record.mysql_stock, sale.stock().await), (0, Some(0)));
}

/// A waiting request handed the lease ends, and the queue moves on, also when a sync has
/// meanwhile recorded her order (committed by her second press, which died before
/// publishing it): her drain publishes nothing, and must not hand the lease back to its
/// own entry at the head of the queue with `lead` in its own outcome list, which its
/// wait takes up again at once, for ever, while nobody else may drain the voucher.
///
/// Buyer 1's waiting request is a real [`seckill_core::purchase::Purchase`], stepped
/// through the component's own state machine; the other presses (buyer 2's drain, buyer
/// 1's second press) and the admin's sync are the scripts, run between its steps.
#[tokio::test]
async fn a_waiter_handed_the_lease_after_a_sync_recorded_her_order_gets_an_answer() {
    let sale = Sale::live(2).await;
    let voucher = sale.voucher;
    // Buyer 2 drains; buyer 1's request is admitted and waits behind her.
    let two = sale.admit(user(2)).await;
    let Lease { token: token2, .. } = two.lease.clone().expect("a lone buyer drains");
    let e2 = entry(user(2), &two);
    let mut waiter = InFlight::start(sale.sale(), user(1), Limits::SHIPPED);
    waiter.step(&sale).await;
    let Some(Decision::Admitted(t1)) = waiter.purchase.decision() else {
        panic!("buyer 1 not admitted: {:?}", waiter.purchase.decision());
    };
    let e1 = Entry {
        user: user(1),
        ticket: t1,
    };
    let (id1, id2) = (order_id(t1), order_id(e2.ticket));
    let waits = Io::Redis(
        Wait {
            voucher_id: voucher,
            entry: e1,
        }
        .command(),
    );
    assert!(!waiter.purchase.is_draining(), "buyer 2 holds the lease");
    assert_eq!(waiter.io, waits, "an admitted buyer not draining waits");
    let verdicts = commit(&sale, &[e2]).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    let batch = published(&[e2], &verdicts);
    let done = sale.publish(&token2, Some(e2), &batch).await;
    assert_eq!(done.unwrap(), Next::Done);
    assert_eq!(sale.lease().await, Some(e1.to_string()));

    // Her waiter takes up the lease handed to it, then stalls past the hand-over; her
    // second press takes the free lease, commits her purchase and dies; her waiter's
    // publication is refused, and it waits again.
    waiter.step(&sale).await;
    let own_token = e1.to_string();
    assert_eq!(
        waiter.purchase.drain(),
        Some((own_token.as_str(), &[][..])),
        "her waiter took up the lease it was handed"
    );
    sale.expire_lease().await;
    let again = sale.admit(user(1)).await;
    assert_eq!(again.decision, Decision::Queued(t1));
    let Lease {
        token: second,
        batch,
    } = again.lease.expect("the free lease goes to her press");
    assert_eq!(batch, vec![e1]);
    let verdicts = commit(&sale, &[e1]).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    waiter.step(&sale).await;
    assert_eq!(
        sale.lease().await,
        Some(second),
        "her waiter's publication was refused"
    );
    assert_eq!(sale.queue().await, vec![e1]);
    assert!(!waiter.purchase.is_draining());
    assert_eq!(waiter.io, waits, "a refused drain with no verdict waits");

    // The second press's lease lapses; her waiter's wait finds no news, and its claim
    // takes the free lease again.
    sale.expire_lease().await;
    waiter.step(&sale).await;
    assert_eq!(
        waiter.io,
        Io::Redis(
            Claim {
                voucher_id: voucher,
                entry: e1,
            }
            .command()
        ),
        "a wait without news claims"
    );
    waiter.step(&sale).await;
    assert_eq!(
        waiter.purchase.drain(),
        Some((own_token.as_str(), &[][..])),
        "her waiter's claim took the lease"
    );
    assert_eq!(sale.lease().await, Some(own_token.clone()));

    // An admin sync records both orders.
    sync(&sale, &[(user(2), id2), (user(1), id1)], 0, 2).await;
    assert_eq!(sale.record(user(1)).await, Some(Record::Ordered(id1, 1)));

    // Her waiter drains on, as the component runs it, and answers: 201 with her order,
    // which MySQL holds for the very ticket her waiting request was admitted with (its
    // commit, written again, finds it: `ordered`). An `already_ordered` would be a second
    // press's answer; a waiter that drains for ever never answers at all.
    let answer = waiter.run(&sale, 200).await;
    assert_eq!(
        answer,
        Some(Ok(Receipt {
            order_id: id1,
            voucher_id: sale.sale(),
            user_id: user(1),
            quantity: 1,
        })),
        "her waiter after 200 steps: drain {:?}, lease {:?}, queue {:?}, news {:?}",
        waiter.purchase.drain(),
        sale.lease().await,
        sale.queue().await,
        sale.news(e1).await
    );
    assert!(sale.queue().await.is_empty(), "the queue moved on");
    assert_eq!(sale.lease().await, None);
    assert_eq!(sale.news(e1).await, Vec::<String>::new());
}

/// After Redis lost a sale and the admin's sync rebuilt it, a buyer whose purchase was
/// committed hears `already_ordered` (docs/operations.md, "What an admin must do"), also when the
/// drainer that held her purchase at the loss commits it only after the sync read MySQL:
/// it told her 201, and her next press must not be a final `sold_out`.
#[tokio::test]
async fn a_purchase_committed_after_the_sync_is_heard_by_its_buyer() {
    let sale = Sale::live(1).await;
    // Buyer 1's request drains her own purchase; its CALL is under way.
    let one = sale.admit(user(1)).await;
    let Lease { token, batch } = one.lease.clone().expect("a lone buyer drains");
    let e1 = entry(user(1), &one);
    let id1 = order_id(e1.ticket);
    assert_eq!(batch, vec![e1]);

    // Redis loses the sale; the admin syncs it from MySQL (no orders, one unit).
    let keys = sale.keys();
    sale.lose(&[keys.voucher(), keys.buyers(), keys.queue(), keys.lease()])
        .await;
    sync(&sale, &[], 1, 1).await;

    // Her drainer's CALL lands: her order is committed, the publication refused, and
    // her request answers 201 from MySQL's verdict.
    let verdicts = commit(&sale, &[e1]).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    let batch = published(&[e1], &verdicts);
    let refused = sale.publish(&token, Some(e1), &batch).await;
    assert_eq!(refused.unwrap(), Next::Lost);

    // Buyer 2 takes the unit Redis still counts; MySQL has none for her.
    let two = sale.admit(user(2)).await;
    let Lease { token: token2, .. } = two.lease.clone().expect("a lone buyer drains");
    let e2 = entry(user(2), &two);
    let verdicts = commit(&sale, &[e2]).await;
    assert_eq!(verdicts, [Verdict::SoldOut]);
    let batch = published(&[e2], &verdicts);
    let done = sale.publish(&token2, Some(e2), &batch).await;
    assert_eq!(done.unwrap(), Next::Done);

    assert_eq!(
        sale.admit(user(1)).await.decision,
        Decision::AlreadyOrdered(id1),
        "buyer 1 holds order {id1}, told 201"
    );
}

/// A voucher whose sale state Redis lost answers `missing` (503 until the admin's sync),
/// also once another voucher was loaded into the restarted Redis: it exists in MySQL, and
/// `unknown` (404) would tell a storefront it does not.
#[tokio::test]
async fn a_voucher_redis_lost_stays_missing_after_another_is_loaded() {
    let redis = RedisServer::start(Persistence::None).await;
    let load = |stock: u32| {
        let redis = &redis;
        async move {
            let sale = Sale {
                conn: redis.conn().await,
                voucher: scripts::create_voucher(stock, -60, 3600)
                    .await
                    .first_bucket(),
            };
            sale.load_live(stock.into(), &[]).await;
            sale
        }
    };
    let lost = load(1).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut lost.conn.clone())
        .await
        .unwrap();
    assert_eq!(lost.admit(user(1)).await.decision, Decision::Missing);
    let _created = load(1).await;
    assert_eq!(lost.admit(user(1)).await.decision, Decision::Missing);
}

/// A drainer that gives up (MySQL failed twice) unlocks the queue at once: the waiter's
/// next check takes it over and commits both purchases, rather than sitting out the rest
/// of the lock's 2 s.
#[tokio::test]
async fn a_waiter_takes_the_queue_over_at_once_from_a_drainer_that_gave_up() {
    let sale = Sale::live(2).await;
    let mut drainer = InFlight::start(sale.sale(), user(1), Limits::SHIPPED);
    drainer.step(&sale).await;
    assert!(matches!(drainer.io, Io::Commit(_)), "{:?}", drainer.io);
    let mut waiter = InFlight::start(sale.sale(), user(2), Limits::SHIPPED);
    waiter.step(&sale).await;
    assert_eq!(
        waiter.io,
        Io::Redis(
            Wait {
                voucher_id: sale.voucher,
                entry: waiter.purchase.queued().unwrap()
            }
            .command()
        )
    );

    for _ in 0..2 {
        drainer.resume(Input::Committed(Err(BackendError::Mysql("gone".into()))));
    }
    let lease = sale.lease().await.expect("still locked");
    drainer.step(&sale).await;
    assert_eq!(sale.lease().await, None, "{lease} unlocked at once");
    let answer = drainer.run(&sale, 3).await;
    assert_eq!(
        answer,
        Some(Err(seckill_core::ApiError::Unavailable(
            seckill_core::Unavailable::Mysql
        )))
    );

    // Its wait finds nothing, its check finds the queue unlocked and takes it.
    waiter.step(&sale).await;
    assert_eq!(
        waiter.io,
        Io::Redis(
            Claim {
                voucher_id: sale.voucher,
                entry: waiter.purchase.queued().unwrap()
            }
            .command()
        )
    );
    waiter.step(&sale).await;
    assert!(waiter.purchase.is_draining(), "{:?}", waiter.io);
    let receipt = waiter.run(&sale, 10).await.expect("answered");
    assert_eq!(receipt.unwrap().user_id, user(2));
    let first = drainer.purchase.queued().unwrap();
    assert_eq!(
        sale.record(user(1)).await,
        Some(Record::Ordered(order_id(first.ticket), 1)),
        "the purchase of the drainer that gave up is committed too"
    );
}

/// A stream of purchases that MySQL keeps up with makes no sweep due at once: each
/// publication of a committed batch audits MySQL's orders and finds none missing, and a
/// waiter handed the lease publishes its empty batch, which nobody committed and which
/// counts no orders, without auditing. Rounds of buyers press together, stepped in
/// turn, so that each round's drainer hands the lease to a waiter; every step's effect on
/// the voucher's `sweep_at` is read. Also counts what the purchases asked of MySQL and
/// Redis.
#[tokio::test]
async fn a_stream_of_purchases_with_nothing_lost_makes_no_sweep_due() {
    const ROUNDS: u64 = 25;
    const BUYERS: u64 = 8;
    let sale = Sale::live(ROUNDS * BUYERS).await;
    let (mut made_due, mut swept, mut mysql, mut redis, mut waiters_drained) = (0, 0, 0, 0, 0);
    let mut due = false;
    for round in 0..ROUNDS {
        let mut flights: Vec<InFlight> = (1..=BUYERS)
            .map(|i| InFlight::start(sale.sale(), user(round * BUYERS + i), Limits::SHIPPED))
            .collect();
        let mut sweeping = vec![false; flights.len()];
        while flights.iter().any(|flight| flight.answer().is_none()) {
            for (i, flight) in flights.iter_mut().enumerate() {
                if flight.answer().is_some() {
                    continue;
                }
                match &flight.io {
                    Io::Commit(_) => mysql += 1,
                    Io::Redis(_) => redis += 1,
                    Io::Sweep(returns::Io::Redis(_)) => redis += 1,
                    Io::Sweep(returns::Io::Done(_)) => {}
                    Io::Sweep(_) => mysql += 1,
                    Io::ReadVoucher => mysql += 1,
                    Io::Answer(_) => {}
                }
                if matches!(flight.io, Io::Sweep(_)) {
                    sweeping[i] = true;
                }
                let was_draining = flight.purchase.is_draining();
                flight.step(&sale).await;
                if !was_draining && flight.purchase.is_draining() && i > 0 {
                    waiters_drained += 1;
                }
                let sweep_at = sale.voucher_field("sweep_at").await;
                if sweep_at == Some(0) && !due {
                    made_due += 1;
                }
                due = sweep_at == Some(0);
            }
        }
        for flight in &flights {
            assert!(
                matches!(flight.answer(), Some(Ok(_))),
                "round {round}: {:?} {:?}",
                flight.answer(),
                flight.purchase.causes()
            );
        }
        swept += sweeping.iter().filter(|swept| **swept).count();
    }
    let purchases = ROUNDS * BUYERS;
    // Nothing was lost: MySQL holds every order Redis learnt of.
    let redis_orders: u64 = sale.voucher_get("orders").await;
    let mysql_orders: u64 = seckill_tests::servers::local::mysql()
        .get_conn()
        .await
        .unwrap()
        .exec_first(
            "SELECT orders FROM tb_seckill_voucher WHERE voucher_id = ?",
            (sale.voucher.raw(),),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((redis_orders, mysql_orders), (purchases, purchases));
    eprintln!(
        "{purchases} purchases, {waiters_drained} waiters drained: {mysql} MySQL statements, \
         {redis} Redis commands, {swept} sweeps"
    );
    assert!(waiters_drained > 0, "no waiter drained");
    assert_eq!(made_due, 0, "steps that made a sweep due at once");
    // Nor does the periodic audit: each publication of a committed batch moves it on.
    assert_eq!(swept, 0, "purchases that swept");
}
