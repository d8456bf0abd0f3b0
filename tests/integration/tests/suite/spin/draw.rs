//! The opening draw under real Spin (docs/design.md, "The opening draw"): presses in a
//! sale's first `draw_ms` enter a draw and hear `202` with `draw_at`; from `draw_at` the
//! units go to the entrants in a random order, whatever their arrival, and a unit given
//! back goes to the losers in that order. And the fairness it is for: scripts pressing
//! in the opening milliseconds win in proportion to their numbers, and people pressing
//! early and late in the window win alike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill_core::sale::Keys;
use seckill_core::BucketId;
use seckill_tests::drivers::app::{Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::crowd::{fair_shares, Storefront};
use seckill_tests::drivers::explorer::setting;
use seckill_tests::drivers::invariants;
use seckill_tests::servers::local;

/// A sale of `stock` units that began at the current second, with a draw of `draw_ms`;
/// returns its id and when its draw is.
async fn drawn_sale(app: &App, stock: u64, draw_ms: u64) -> (u64, Instant) {
    let now = chrono::Utc::now();
    let body = json!({
        "title": "drawn voucher",
        "stock": stock,
        "begin_time": now.to_rfc3339(),
        "end_time": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "draw_ms": draw_ms,
    });
    let answer = app
        .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    let draw_at = chrono::DateTime::parse_from_rfc3339(answer.body["draw_at"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    let left = (draw_at - chrono::Utc::now()).to_std().unwrap_or_default();
    (answer.body["id"].as_u64().unwrap(), Instant::now() + left)
}

fn retry_after(answer: &Answer) -> u64 {
    answer.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Presses until a `201` or a `409`, as a sale page does after `draw_at`.
async fn result(app: &App, voucher: u64, user: u64) -> Answer {
    loop {
        let answer = app.buy(voucher, user).await;
        if answer.status == StatusCode::CREATED || answer.status == StatusCode::CONFLICT {
            return answer;
        }
        assert!(
            answer.status == StatusCode::ACCEPTED || answer.status == StatusCode::TOO_MANY_REQUESTS,
            "{answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sleep_until(at: Instant) {
    tokio::time::sleep_until((at + Duration::from_millis(50)).into()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_draw_answers_its_entrants_202_then_sells_to_those_it_drew() {
    let app = App::start().await;
    let (stock, entrants) = (5, 15);
    let (voucher, draw_at) = drawn_sale(&app, stock, 2_500).await;
    let base = 8_800_000;
    for user in base..base + entrants {
        let entered = app.buy(voucher, user).await;
        assert_eq!(
            (entered.status, entered.error()),
            (StatusCode::ACCEPTED, "in_draw"),
            "{entered:?}"
        );
        assert!(entered.body["draw_at"].is_string(), "{entered:?}");
        assert!((1..=3).contains(&retry_after(&entered)), "{entered:?}");
    }
    // Pressing again changes nothing, and the page shows the draw.
    let again = app.buy(voucher, base).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{again:?}");
    let page = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(page.body["draw_at"], again.body["draw_at"], "{page:?}");
    assert_eq!(
        page.body["remaining"],
        json!(stock),
        "nothing handed out yet"
    );

    sleep_until(draw_at).await;
    let mut answers = BTreeMap::new();
    for user in base..base + entrants {
        answers.insert(user, result(&app, voucher, user).await);
    }
    // A winner hears her order with a 201, whoever's press committed it.
    let won: BTreeSet<u64> = answers
        .iter()
        .filter(|(_, a)| a.status == StatusCode::CREATED && a.order_id().is_some())
        .map(|(user, _)| *user)
        .collect();
    assert_eq!(won.len() as u64, stock, "{answers:#?}");
    // Her next press hears it as any buyer's second press does.
    let winner = *won.first().unwrap();
    let again = app.buy(voucher, winner).await;
    assert_eq!(
        (again.status, again.error(), again.order_id()),
        (
            StatusCode::CONFLICT,
            "already_ordered",
            answers[&winner].order_id()
        )
    );
    let mut places: Vec<u64> = answers
        .values()
        .filter(|a| a.error() == "sold_out")
        .map(|a| a.body["position"].as_u64().unwrap())
        .collect();
    places.sort_unstable();
    assert_eq!(
        places,
        (1..=entrants - stock).collect::<Vec<_>>(),
        "every loser has her own place in line: {answers:#?}"
    );
    let told: Vec<(u64, u64)> = answers
        .iter()
        .filter_map(|(user, a)| a.order_id().map(|order| (order, *user)))
        .collect();
    invariants::read(voucher).await.assert_sound(&told);
    let late = app.buy(voucher, base + 100).await;
    assert_eq!(late.error(), "sold_out", "no entrant: {late:?}");

    // A winner cancels: the unit goes to the first in line, whoever presses next.
    let (cancelled, canceller) = told[0];
    let first_in_line = *answers
        .iter()
        .find(|(_, a)| a.body["position"] == json!(1))
        .unwrap()
        .0;
    let cancel = app.cancel(cancelled, canceller).await;
    assert_eq!(cancel.status, StatusCode::OK, "{cancel:?}");
    let late = app.buy(voucher, base + 101).await;
    assert_eq!(late.error(), "sold_out", "the line comes first: {late:?}");
    let promoted = result(&app, voucher, first_in_line).await;
    assert_eq!(promoted.status, StatusCode::CREATED, "{promoted:?}");
    assert!(promoted.order_id().is_some(), "{promoted:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_at_the_opening_and_people_over_the_window_win_alike() {
    let app = App::start().await;
    let (stock, bots, people) = (100u64, 150u64, 850u64);
    let front = Storefront::new(format!("http://{}", app.addr()));
    let (voucher, draw_at) = drawn_sale(&app, stock, 3_000).await;
    let window = draw_at.saturating_duration_since(Instant::now()) - Duration::from_millis(300);
    let base = 9_500_000;
    // Scripts fire together at the opening; people press spread over the window.
    let path = format!("/vouchers/{voucher}/orders");
    for (status, body) in front
        .scripts_then_people(&path, base, (bots, people), window)
        .await
    {
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    sleep_until(draw_at).await;
    let mut winners = Vec::new();
    for i in 0..bots + people {
        if result(&app, voucher, base + i).await.order_id().is_some() {
            winners.push(i);
        }
    }
    assert_eq!(winners.len() as u64, stock);
    let (bots_won, early, late) = fair_shares(&winners, (bots, people));
    println!(
        "draw: scripts ({:.0} % of the entrants) won {bots_won} of {stock} units; people \
         pressing in the window's first half won {early}, in its second half {late}",
        100.0 * bots as f64 / (bots + people) as f64
    );
}

/// A draw's units commit at the group commit's pace, and every winner hears `201` with
/// her order: `DRAW_UNITS` units (CI: 2,000; BENCHMARKS.md has 10,000 and 100,000) to as
/// many entrants, whose line is filled as the window's presses fill it (`ZADD NX` of
/// each place), pressing after `draw_at` in the line's order from 64 connections at
/// once. Prints how long until the last winner heard her order, so until MySQL held them
/// all (no figure is asserted: a shared machine's timings are no test).
#[tokio::test(flavor = "multi_thread")]
async fn every_winner_of_a_large_draw_hears_201_as_the_group_commit_commits() {
    let units = setting("DRAW_UNITS", 300);
    let app = App::start().await;
    let (voucher, draw_at) = drawn_sale(&app, units, 2_000).await;
    let base = 30_000_000 + 10_000_000 * (voucher % 100);
    let mut redis = local::redis().await;
    let line = Keys::new(BucketId::from_raw(voucher)).line(1);
    let places: Vec<u64> = (0..units).collect();
    for chunk in places.chunks(1_000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&line).arg("NX");
        for place in chunk {
            zadd.arg(place + 1).arg(base + place);
        }
        zadd.query_async::<()>(&mut redis).await.unwrap();
    }
    redis::cmd("PEXPIRE")
        .arg(&line)
        .arg(3_600_000)
        .query_async::<()>(&mut redis)
        .await
        .unwrap();

    sleep_until(draw_at).await;
    let started = Instant::now();
    let app = Arc::new(app);
    let next = Arc::new(AtomicU64::new(0));
    let mut pressers = Vec::new();
    for _ in 0..setting("DRAW_PRESSERS", 16) {
        let (app, next) = (app.clone(), next.clone());
        pressers.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            loop {
                let place = next.fetch_add(1, Ordering::Relaxed);
                if place >= units {
                    return answers;
                }
                let user = base + place;
                answers.push((user, result(&app, voucher, user).await));
            }
        }));
    }
    let mut told = Vec::new();
    for presser in pressers {
        for (user, answer) in presser.await.unwrap() {
            assert_eq!(
                answer.status,
                StatusCode::CREATED,
                "winner {user}: {answer:?}"
            );
            told.push((answer.order_id().unwrap(), user));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let record = invariants::read(voucher).await;
    record.assert_sound(&told);
    assert_eq!(record.live_orders(), units);
    println!(
        "a draw of {units} units: every winner heard 201 within {seconds:.2} s of draw_at \
         ({:.0} orders committed a second)",
        units as f64 / seconds
    );
}
