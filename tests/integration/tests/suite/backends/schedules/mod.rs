//! The schedule explorer: random interleavings of purchase requests, each one the
//! component's own purchase (`seckill_core::purchase`) run a step at a time on real
//! servers (a private `redis-server`, so that it may be flushed or rolled back, and the
//! shared MariaDB with a fresh voucher per schedule), with faults between the steps:
//! replies lost (admission's, a commit's, a publication's, a claim's), servers out of
//! reach, two commits racing inside MySQL, requests dying anywhere, leases lapsing, the
//! sale window passing (its end crossed while requests are in flight), admin syncs,
//! Redis losing everything or rolling back to an earlier snapshot, failing creations,
//! and restocks (the merchant adding units to the live sale, their give-back's I/O lost,
//! failing or dying, or their reply lost once MySQL committed). Every promise of
//! docs/design.md is checked after each step and again once the sale is quiet, with
//! every restock counted once in MySQL's and Redis's initial stock and every restocked
//! unit sold.
//!
//! Nothing here restates the handler: a request is a `Purchase`, and the explorer only
//! chooses when its next I/O happens and whether it succeeds. A step names what it acts
//! on by position (the n-th request in flight, the n-th sync) and does nothing when there
//! is nothing there, so every schedule is valid and proptest shrinks a failure to a short
//! one by dropping steps.
//!
//! `SCHEDULE_CASES` sets the number of schedules (CI: 60; every run draws new ones), `SCHEDULE_BUYERS` the buyers
//! of each (3: few, so that they meet) and `SCHEDULE_STOCK` the most units of its voucher
//! (3: enough for a batch of waiters, short of the buyers in most schedules). The soak
//! (docs/design.md, "The schedule explorer"):
//! `SCHEDULE_CASES=20000 SCHEDULE_BUYERS=6 SCHEDULE_STOCK=4 cargo test --workspace --test suite -- backends::schedules:: --nocapture`.
//!
//! The world (its state, its setup and its I/O with Redis and MySQL) lives in `world.rs`, the moves (each step and what it does) in `moves.rs`, and the checks of the promises in `checks.rs`.

mod checks;
mod moves;
mod world;

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use seckill_core::sale::Limits;
use seckill_core::OrderId;
use seckill_tests::drivers::explorer::{explore, runtime, setting};
use seckill_tests::drivers::scripts;
use seckill_tests::servers::faults::{Persistence, RedisServer};

use moves::{step, Step};
use world::{Phase, Shape, World};

const DEFAULT_CASES: u32 = 40;
const DEFAULT_BUYERS: u64 = 3;
const DEFAULT_STOCK: u64 = 3;
/// Rows a sync reads from MySQL per page: small, so syncs take several steps.
const SYNC_PAGE: usize = 2;
/// Batch sizes a schedule's drainers take: with few buyers, 1 and 2 make a drain span
/// several batches; 256 is the component's.
const BATCHES: [i64; 3] = [1, 2, Limits::SHIPPED.batch];
/// Steps the quiet phase may take to end every request before it calls it a livelock.
const SETTLE_STEPS: usize = 2_000;
/// How far ahead of Redis's clock `Step::EndSoon` puts the end of the sale: a few steps
/// later, so that requests in flight straddle it.
const END_SOON_MS: i64 = 15;
/// Orders a give-back the explorer starts expires, and returns it reads, per page: small,
/// so that it takes several steps.
const GIVE_BACK_PAGE: u32 = 2;

/// How often the schedules reached the line's paths (printed after the run): units the
/// line handed out, looks that answered a purchase the line queued, leaves of a buyer in
/// line, and quiet sales whose units waited for the first in line, asking for more.
static LINE_HANDED: AtomicU64 = AtomicU64::new(0);
static LOOKS_ORDERED: AtomicU64 = AtomicU64::new(0);
static LEFT_IN_LINE: AtomicU64 = AtomicU64::new(0);
static UNITS_WAITING: AtomicU64 = AtomicU64::new(0);
/// And schedules that restocked the sale, those whose restock.lua applied a restock again
/// (a mark moved back), and those that applied one again after a rollback took it back.
static RESTOCKED: AtomicU64 = AtomicU64::new(0);
static RESTOCKED_AGAIN: AtomicU64 = AtomicU64::new(0);
static RESTOCKED_AFTER_ROLLBACK: AtomicU64 = AtomicU64::new(0);

/// Plays one schedule to its end, the sale then quiet; `Err` names the promise broken.
/// Returns whether it applied a restock again, and again after a rollback.
async fn play(
    redis: &RedisServer,
    shape: Shape,
    steps: &[Step],
) -> Result<(bool, bool), TestCaseError> {
    let mut world = World::new(redis, shape).await;
    for step in steps {
        world.log.push(format!("> {step:?}"));
        world.run(step).await?;
    }
    world.quiesce().await?;
    LINE_HANDED.fetch_add(world.sale.line_handed().await as u64, Ordering::Relaxed);
    let (again, after_rollback) = world.restocked_again;
    for (reached, counter) in [
        (!world.restocks.is_empty(), &RESTOCKED),
        (again, &RESTOCKED_AGAIN),
        (after_rollback, &RESTOCKED_AFTER_ROLLBACK),
    ] {
        counter.fetch_add(u64::from(reached), Ordering::Relaxed);
    }
    // The shared MariaDB keeps the voucher: its unpaid orders, past their deadline a
    // quarter of an hour later, would queue before other suites' in the feed's sweeps
    // (most overdue first). They go, as a lost commit goes.
    let unpaid: Vec<u64> = world
        .query(
            "SELECT id FROM tb_voucher_order WHERE voucher_id = ? AND status = 1",
            (world.sale.voucher.raw(),),
        )
        .await;
    let unpaid: Vec<OrderId> = unpaid.into_iter().map(OrderId::from_raw).collect();
    scripts::lose_commits(world.sale.voucher, &unpaid).await;
    if std::env::var("SCHEDULE_LOG").is_ok() {
        eprintln!("{}", world.log.join("\n"));
    }
    let _ = world.db.disconnect().await;
    Ok(world.restocked_again)
}

/// Schedules that once broke a promise, found by the explorer, kept as they shrank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_that_once_broke_a_promise_hold() {
    use Step::*;
    let redis = RedisServer::start(Persistence::None).await;
    let found: [(u64, i64, u64, Vec<Step>); 6] = [
        (
            // MySQL lost an order while Redis was too generous after a sync: the unit freed
            // went to a buyer told sold_out, and the lost order has none left.
            2,
            2,
            1,
            vec![
                Sync,
                PressReplyLost { buyer: 1 },
                Press { buyer: 1 },
                ExpireLease,
                Press { buyer: 1 },
                Crowd,
                ReplyLost { n: 1 },
                Sync,
                Press { buyer: 1 },
                Proceed { n: 1 },
                Press { buyer: 3 },
                MysqlLoses { k: 1 },
            ],
        ),
        (
            // The same, the buyer whose order is lost for good buying again before the end.
            2,
            1,
            1,
            vec![
                SyncStage { n: 0 },
                Sync,
                Press { buyer: 1 },
                Sync,
                ReplyLost { n: 0 },
                Proceed { n: 0 },
                MysqlLoses { k: 1 },
                Press { buyer: 1 },
                Press { buyer: 1 },
                Press { buyer: 1 },
                Crowd,
            ],
        ),
        (
            // A sweep whose lease lapsed while it read MySQL (which had lost an order)
            // audited after another sweep had healed it and given an expired order's unit
            // back: its audit moved the sale's mark back, and that unit came back twice.
            1,
            1,
            1,
            vec![
                AdminExpire,
                Press { buyer: 3 },
                Proceed { n: 0 },
                Proceed { n: 0 },
                AdminExpire,
                MysqlLoses { k: 1 },
                Due,
                Press { buyer: 1 },
                Press { buyer: 1 },
                GiveBack { n: 1 },
                GiveBack { n: 0 },
                GiveBack { n: 0 },
                ExpireLease,
                Press { buyer: 1 },
            ],
        ),
        (
            // A buyer told sold_out after MySQL lost the only order, then an admin's sync:
            // the sync hands the lost order's unit out again, and she may buy it.
            1,
            1,
            1,
            vec![
                Press { buyer: 2 },
                Proceed { n: 0 },
                MysqlLoses { k: 1 },
                Press { buyer: 1 },
                Sync,
                Press { buyer: 1 },
                Proceed { n: 2 },
                ReplyLost { n: 0 },
            ],
        ),
        (
            // A Redis that lost everything handed a lost order's id out again, and MySQL
            // lost that order: its heal finds the id another buyer's and names it lost
            // for good, as it is; the checks had read "its id in MySQL" as "hers".
            3,
            1,
            1,
            vec![
                Press { buyer: 1 },
                Proceed { n: 1 },
                Proceed { n: 3 },
                Press { buyer: 3 },
                Proceed { n: 1 },
                Collide,
                Press { buyer: 2 },
                Sync,
                MysqlLoses { k: 2 },
                Proceed { n: 2 },
                Press { buyer: 1 },
                Proceed { n: 1 },
                Press { buyer: 2 },
                Die { n: 1 },
                SettleReplyLost {
                    buyer: 2,
                    pay: true,
                },
                Proceed { n: 3 },
                Unreachable { n: 3 },
            ],
        ),
        (
            // A sync left Redis too generous by a queued purchase of two units, whose
            // order then expired (two more): buyer 2, asking for three, was admitted,
            // and MySQL, with two left, refused her as sold out; she hears that two are
            // left (MySQL's verdict `short`).
            2,
            1,
            3,
            vec![Press { buyer: 1 }, Sync],
        ),
    ];
    for (stock, batch, per_buyer, steps) in found {
        let shape = Shape {
            stock,
            buyers: 3,
            batch,
            phase: Phase::Live,
            per_buyer,
        };
        if let Err(broken) = play(&redis, shape, &steps).await {
            panic!("{broken}");
        }
    }
}

/// A restock applied again, each way the explorer's moves reach it, with every check on:
/// after a rollback to a snapshot from before its give-back, the admin's sweep applies it
/// again (its initial stock too, which the snapshot lacks); and a sold-out publication of
/// a batch committed before the restock moves the mark back once the restock was applied,
/// and the next sweep applies its units again (not its initial stock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_s_moves_reach_a_restock_applied_again() {
    use Step::*;
    let redis = RedisServer::start(Persistence::None).await;
    let live = |stock, batch| Shape {
        stock,
        buyers: 3,
        batch,
        phase: Phase::Live,
        per_buyer: 1,
    };
    let give_backs = || vec![GiveBack { n: 0 }; 12];
    let rollback = [
        vec![Snapshot, Restock { units: 2 }],
        give_backs(),
        vec![Rollback, AdminExpire],
        give_backs(),
    ]
    .concat();
    let reached = play(&redis, live(1, 1), &rollback).await;
    assert_eq!(
        reached.map_err(|broken| broken.to_string()),
        Ok((false, true))
    );
    // Buyer 1's purchase queued, a sync makes Redis too generous by its unit, which buyer 2
    // is admitted for: MySQL tells her sold_out, and her publication comes after the
    // restock's give-back.
    // Buyer 1's request commits and publishes; buyer 2's sweeps (the sync made the sweep
    // due), is handed the lease and commits.
    let sold_out = [
        vec![Press { buyer: 1 }, Sync, Press { buyer: 2 }],
        vec![Proceed { n: 0 }; 13],
        vec![Restock { units: 1 }],
        give_backs(),
        vec![Proceed { n: 0 }],
    ]
    .concat();
    let reached = play(&redis, live(1, 2), &sold_out).await;
    assert_eq!(
        reached.map_err(|broken| broken.to_string()),
        Ok((true, false))
    );
}

#[test]
fn every_promise_holds_under_random_schedules() {
    let cases = setting("SCHEDULE_CASES", DEFAULT_CASES as u64) as u32;
    let buyers = setting("SCHEDULE_BUYERS", DEFAULT_BUYERS).max(1);
    let most_stock = setting("SCHEDULE_STOCK", DEFAULT_STOCK).max(1);
    let runtime = runtime();
    let redis = runtime.block_on(RedisServer::start(Persistence::None));
    let started = std::time::Instant::now();
    let schedules = (
        1..=most_stock,
        prop::sample::select(BATCHES.to_vec()),
        prop_oneof![4 => Just(Phase::Live), 1 => Just(Phase::NotStarted)],
        // Half the schedules let a buyer hold up to three units (and buyers ask for 1, 2
        // or 3 of them).
        prop_oneof![Just(1u64), Just(3u64)],
        prop::collection::vec(step(buyers), 1..60),
    );
    let explored = explore(
        cases,
        schedules,
        |(stock, batch, phase, per_buyer, steps)| {
            let shape = Shape {
                stock,
                buyers,
                batch,
                phase,
                per_buyer,
            };
            runtime.block_on(play(&redis, shape, &steps)).map(|_| ())
        },
    );
    println!(
        "reached: {} units handed out by the line, {} looks answering the purchase it \
         queued, {} leaves of a buyer in line, {} quiet sales whose units wait for the \
         first in line; {} schedules restocking the sale, {} applying a restock again, {} \
         applying one again after a rollback",
        LINE_HANDED.load(Ordering::Relaxed),
        LOOKS_ORDERED.load(Ordering::Relaxed),
        LEFT_IN_LINE.load(Ordering::Relaxed),
        UNITS_WAITING.load(Ordering::Relaxed),
        RESTOCKED.load(Ordering::Relaxed),
        RESTOCKED_AGAIN.load(Ordering::Relaxed),
        RESTOCKED_AFTER_ROLLBACK.load(Ordering::Relaxed)
    );
    explored.conclude(
        &format!("schedules with {buyers} buyers and up to {most_stock} units"),
        started,
    );
}
