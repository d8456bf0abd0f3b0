//! The schedule explorer on a sale in buckets (docs/design.md, "Buckets"): random
//! interleavings of the component's own purchases (`seckill_core::purchase`) of a voucher
//! whose stock is spread over two or three buckets, a step at a time on the shared Redis
//! and MariaDB, with presses that know the buckets and presses that learn them, replies
//! lost, requests dying, leases lapsing and orders cancelled (a unit back to its bucket)
//! between the steps, MySQL losing a buyer's commit (a failover to a replica without
//! it) with sweeps that audit a bucket and heal what MySQL lost, and restocks (units
//! spread over the buckets, each bucket's give-back in flight, lost, dying, or never
//! started when the reply was lost). After each step: each restock spread as MySQL
//! spreads units, with its events, and counted once in each bucket's initial stock; never
//! more live orders than units, a unit in MySQL for every live order of each bucket, one
//! order per buyer across the buckets, every order told in MySQL under the voucher (but
//! those MySQL lost, until healed), Redis never more generous than MySQL in any bucket,
//! no bucket marked all-out while it has a unit, no `already_ordered` naming an order
//! cancelled before she pressed, and a `sold_out` only when every bucket was empty, or
//! the buyer's bucket was marked so by a press that found them all empty, or a unit came
//! back while she pressed, and never a `sold_out` or `ended` while a bucket holds her
//! purchase, queued or committed (a walk's pointer at her bucket sends her presses there),
//! unless a unit came back while she pressed, for another press of hers. Once quiet,
//! every bucket is audited and healed, and every buyer presses until she holds an order
//! or hears `sold_out`: then every unit is sold, or every buyer holds an order; late
//! buyers mark their buckets sold out, every buyer presses again, and again once the
//! sale has ended; each bucket's Redis agrees with MySQL (its initial stock too) and none
//! is behind it; and every order told that MySQL lost is back, or yielded to another
//! order of the buyer's, or named lost.
//!
//! The same schedules run through an opening draw (docs/design.md, "The opening draw"):
//! one bucket whose window closes within the steps or after them, each press handing
//! units to at most one or two entrants (fewer than the buyers, so that a draw takes
//! several presses), the buyers asking for different quantities; nobody holds a
//! unit before the draw, and each hand-out goes in place order among the entrants who fit
//! the units left: an entrant still in line ahead of one handed units asked for more than
//! were left when the hand-out passed her, and one that stopped short of its limit left
//! nobody in line who fits what is left.
//!
//! `SCHEDULE_CASES` sets the number of schedules (CI: 40; every run draws new ones); the
//! soak runs `SCHEDULE_CASES=5000 cargo test --workspace --test suite --
//! backends::bucket_schedules:: --nocapture`.
//!
//! The world (its state, its setup and its I/O with Redis and MySQL) lives in `world.rs`, the moves (each step and what it does) in `moves.rs`, and the checks of the promises in `checks.rs`.

mod checks;
mod moves;
mod world;

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redis::AsyncCommands;

use seckill_tests::drivers::explorer::{explore, runtime, setting};

use moves::{step, Step};
use world::{Checked, World};

const DEFAULT_CASES: u32 = 25;
const BUYERS: u64 = 5;
/// Steps the quiet phase may take to end every request before it calls it a livelock.
const SETTLE_STEPS: usize = 2_000;
/// The first of the late buyers, one a bucket (ids in a row: one of each bucket).
const LATE_BUYERS: u64 = 1_000;

/// How often the schedules reached the paths of issue 46 (printed after the run): a
/// heal whose order yielded to the buyer's order in another bucket, a buyer told her
/// order in another bucket was cancelled or expired, and a unit given back to a bucket
/// marked all-out.
static HEALED_ELSEWHERE: AtomicU64 = AtomicU64::new(0);
static DEAD_ELSEWHERE: AtomicU64 = AtomicU64::new(0);
static UNMARKED: AtomicU64 = AtomicU64::new(0);
/// And how often a buyer heard fewer units were left than she asked for.
static SHORT: AtomicU64 = AtomicU64::new(0);
/// How often a draw's press handed units to as many entrants as it may, and how often
/// one handed units to an entrant behind one who asked for more than was left.
static HAND_OUTS_FULL: AtomicU64 = AtomicU64::new(0);
static PASSED_OVER: AtomicU64 = AtomicU64::new(0);
/// And how often a buyer in the draw's line left it, and a look answered her order.
static LEFT_LINE: AtomicU64 = AtomicU64::new(0);
static LOOKS_ORDERED: AtomicU64 = AtomicU64::new(0);

/// Plays the schedule to its quiet end. Returns whether it restocked the sale, sold
/// restocked units, and delivered a restock to a bucket by another run than its own
/// give-back.
async fn play(mut world: World, steps: &[Step]) -> Result<[bool; 3], TestCaseError> {
    for step in steps {
        world.play(step).await?;
    }
    world.settle().await?;
    let (sold, by_another) = world.restock_reached;
    let restocked = !world.restocks.is_empty();
    let _ = world.db.into_inner().disconnect().await;
    Ok([restocked, sold, by_another])
}

/// How many schedules reached each of [`play`]'s restock paths.
#[derive(Default)]
struct Restocks([AtomicU64; 3]);

impl Restocks {
    fn count(&self, reached: Result<[bool; 3], TestCaseError>) -> Checked {
        for (counter, reached) in self.0.iter().zip(reached?) {
            counter.fetch_add(u64::from(reached), Ordering::Relaxed);
        }
        Ok(())
    }

    fn print(&self) {
        let [restocked, sold, by_another] = self.0.each_ref().map(|n| n.load(Ordering::Relaxed));
        println!(
            "reached: {restocked} schedules restocking the sale, {sold} selling restocked \
             units, {by_another} delivering a restock by another run than its give-back"
        );
    }
}

/// The last request pressed runs to its answer, alone; its answer, as logged.
async fn answered_alone(world: &mut World) -> Result<String, TestCaseError> {
    let id = world.next_request;
    while let Some(n) = world.requests.iter().position(|r| r.id == id) {
        world.proceed(n, false).await?;
        world.check().await?;
    }
    let prefix = format!("#{id} answers ");
    Ok(world
        .log
        .iter()
        .rev()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_default()
        .to_string())
}

/// A buyer presses, knowing the buckets, and hears her answer before anything else runs.
async fn press_alone(world: &mut World, buyer: u64) -> Result<String, TestCaseError> {
    world.play(&Step::Press { buyer, knows: true }).await?;
    answered_alone(world).await
}

/// Buyer 1 (home B) takes B's unit; buyer 3 (home B) walks to A for hers. Then B forgets
/// where her walk went (as when a press of hers raced the walk before it pointed B at A),
/// so that her next press is admitted at B afresh.
async fn walked(world: &mut World) -> Checked {
    assert!(press_alone(world, 1).await?.starts_with("Ok"));
    assert!(press_alone(world, 3).await?.starts_with("Ok"));
    assert_eq!(world.walked().await, [3]);
    let home = &world.sales[1];
    let _: () = home
        .conn
        .clone()
        .hdel(home.keys().buyers(), 3)
        .await
        .unwrap();
    Ok(())
}

/// A unit cancelled in one bucket of a sale whose every bucket a walk marked all out: once
/// its restock is over no bucket is marked (the explorer's check), and a buyer of the
/// other bucket buys it on her first press.
#[test]
fn a_unit_cancelled_in_one_bucket_reopens_the_others_at_once() {
    let runtime = runtime();
    runtime
        .block_on(async {
            // Two buckets of one unit: even buyers' home A, odd ones' B.
            let mut world = World::new(2, 2, 1).await;
            assert!(press_alone(&mut world, 1).await?.starts_with("Ok"));
            assert!(press_alone(&mut world, 2).await?.starts_with("Ok"));
            assert!(press_alone(&mut world, 5).await?.contains("SoldOut"));
            for sale in &world.sales {
                assert!(sale.all_out().await, "bucket {} marked", sale.voucher);
            }
            world.play(&Step::Cancel { n: 1 }).await?; // buyer 2's, in A
            assert!(press_alone(&mut world, 7).await?.starts_with("Ok"));
            world.settle().await
        })
        .unwrap();
}

/// Issue 46's orders, each reached by the explorer's own moves, on a sale of two buckets
/// of one unit (even buyers' home the first, A; odd ones' B), where buyer 3 walked to A
/// for her order once buyer 1 took B's unit: the checks after each step, and the quiet
/// end's, hold.
#[test]
fn the_explorer_s_moves_reach_issue_46_s_orders() {
    let runtime = runtime();
    let reached = runtime.block_on(async {
        // A dead order of another bucket (her order in A cancelled, B's unit back and B
        // with no record of her): she hears order_cancelled, and the unit her purchase
        // held in B comes back while B is marked all-out (buyer 2 took A's unit back and
        // buyer 5 found both empty).
        let mut world = World::new(2, 2, 1).await;
        walked(&mut world).await?;
        world.play(&Step::Cancel { n: 1 }).await?; // buyer 3's
        world.play(&Step::Cancel { n: 0 }).await?; // buyer 1's
        world.play(&Step::Walked { n: 0 }).await?;
        world.proceed(0, false).await?; // admitted at B
        world
            .play(&Step::Press {
                buyer: 2,
                knows: true,
            })
            .await?;
        world.proceed(1, false).await?; // admitted at A
        assert!(press_alone(&mut world, 5).await?.contains("SoldOut"));
        assert!(world.sales[1].all_out().await, "B marked");
        world.run_all().await?;
        let told = world.log.iter().any(|line| line.contains("OrderCancelled"));
        world.settle().await?;
        let dead = told;

        // An order MySQL lost, whose buyer then ordered in her own bucket: A's sweep heals
        // it into her order in B.
        let mut world = World::new(2, 2, 1).await;
        walked(&mut world).await?;
        world.play(&Step::LoseCommit { n: 1 }).await?; // buyer 3's
        world.play(&Step::Cancel { n: 0 }).await?; // buyer 1's
        world.play(&Step::Walked { n: 0 }).await?;
        let again = answered_alone(&mut world).await?;
        assert!(again.starts_with("Ok"), "{again}");
        world.play(&Step::Sweep { bucket: 0 }).await?;
        let healed = world.log.iter().any(|line| line.contains("other buckets"));
        world.settle().await?;
        Ok::<_, TestCaseError>((dead, healed))
    });
    match reached {
        Ok(reached) => assert_eq!(reached, (true, true), "(told dead, healed elsewhere)"),
        Err(broken) => panic!("{broken}"),
    }
}

/// A schedule the explorer once found breaking a promise, shrunk: buyer 2's admission at
/// her home ran but its reply was lost, then she bought in another bucket; a later press
/// there, told sold_out and handed the lease, drained her queued purchase, whose unit
/// went back (her order is the other bucket's), and answered sold_out beside that unit.
/// It presses again now.
#[test]
fn a_schedule_over_buckets_that_once_broke_a_promise_holds() {
    use Step::*;
    let steps = [
        Press {
            buyer: 5,
            knows: true,
        },
        Proceed { n: 0 },
        Press {
            buyer: 2,
            knows: true,
        },
        Press {
            buyer: 1,
            knows: false,
        },
        Proceed { n: 1 },
        Proceed { n: 0 },
        Press {
            buyer: 2,
            knows: false,
        },
        Press {
            buyer: 1,
            knows: false,
        },
        Cancel { n: 0 },
        Proceed { n: 0 },
        ReplyLost { n: 0 },
        Press {
            buyer: 4,
            knows: false,
        },
        Press {
            buyer: 1,
            knows: false,
        },
    ];
    let runtime = runtime();
    if let Err(broken) = runtime.block_on(async { play(World::new(3, 3, 1).await, &steps).await }) {
        panic!("{broken}");
    }
}

#[test]
fn every_promise_holds_over_buckets_under_random_schedules() {
    let cases = setting("SCHEDULE_CASES", DEFAULT_CASES as u64) as u32;
    let runtime = runtime();
    let started = std::time::Instant::now();
    // Half the schedules let a buyer hold up to three units.
    let schedules = (
        2..=3u32,
        1..=3u64,
        prop_oneof![Just(1u64), Just(3u64)],
        prop::collection::vec(step(), 1..60),
    )
        .prop_map(|(buckets, per_bucket, per_buyer, steps)| {
            (buckets, per_bucket * buckets as u64, per_buyer, steps)
        });
    let restocks = Restocks::default();
    let explored =
        explore(cases, schedules, |(buckets, stock, per_buyer, steps)| {
            restocks.count(runtime.block_on(async {
                play(World::new(stock, buckets, per_buyer).await, &steps).await
            }))
        });
    println!(
        "reached: {} heals yielding to an order in another bucket, {} buyers told their \
         order in another bucket is dead, {} units given back to a bucket marked all-out, \
         {} presses told fewer units were left than asked",
        HEALED_ELSEWHERE.load(Ordering::Relaxed),
        DEAD_ELSEWHERE.load(Ordering::Relaxed),
        UNMARKED.load(Ordering::Relaxed),
        SHORT.load(Ordering::Relaxed)
    );
    restocks.print();
    explored.conclude("schedules over buckets", started);
}

#[test]
fn every_promise_holds_through_an_opening_draw_under_random_schedules() {
    let cases = setting("SCHEDULE_CASES", DEFAULT_CASES as u64) as u32;
    let runtime = runtime();
    let started = std::time::Instant::now();
    // Windows closing within the schedule's steps or after them all; most schedules let
    // a buyer hold up to three units, so that a unit nobody at the head of the line fits
    // occurs; a press hands units to one or two entrants.
    let schedules = (
        1..=6u64,
        20..=400i64,
        prop_oneof![1 => Just(1u64), 3 => Just(3u64)],
        1..=2i64,
        prop::collection::vec(step(), 1..60),
    );
    let restocks = Restocks::default();
    let explored = explore(
        cases,
        schedules,
        |(stock, window_ms, per_buyer, hand_out, steps)| {
            restocks.count(runtime.block_on(async {
                play(
                    World::drawing(stock, window_ms, per_buyer, hand_out).await,
                    &steps,
                )
                .await
            }))
        },
    );
    println!(
        "reached: {} presses handing units to as many entrants as they may with more in \
         line who fit, {} hand-outs passing over an entrant asking for more than was left, \
         {} leaves of a buyer in line, {} looks answering a purchase the line queued",
        HAND_OUTS_FULL.load(Ordering::Relaxed),
        PASSED_OVER.load(Ordering::Relaxed),
        LEFT_LINE.load(Ordering::Relaxed),
        LOOKS_ORDERED.load(Ordering::Relaxed)
    );
    restocks.print();
    explored.conclude("schedules through a draw", started);
}

/// A unit given back to a bucket after its sold-out sightings: the quiet phase's presses
/// "a while later" still weighed those sightings (its model aged the marks, not the
/// sightings), and every walk stopped at a bucket marking itself all out anew.
#[test]
fn a_unit_given_back_sells_once_the_sightings_lapse() {
    use Step::*;
    let steps = [
        Press {
            buyer: 5,
            knows: true,
        },
        Proceed { n: 0 },
        Proceed { n: 0 },
        Press {
            buyer: 4,
            knows: true,
        },
        Proceed { n: 0 },
        Press {
            buyer: 1,
            knows: true,
        },
        Proceed { n: 0 },
        Press {
            buyer: 4,
            knows: false,
        },
        Press {
            buyer: 4,
            knows: false,
        },
        Proceed { n: 0 },
        Press {
            buyer: 2,
            knows: false,
        },
        Proceed { n: 1 },
        Cancel { n: 0 },
    ];
    let runtime = runtime();
    if let Err(broken) = runtime.block_on(async { play(World::new(3, 3, 1).await, &steps).await }) {
        panic!("{broken}");
    }
}
