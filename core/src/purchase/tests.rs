use super::*;
use crate::buckets::Spread;
use crate::ids::VoucherId;
use crate::ledger::Ledger;
use crate::order_id::EPOCH;
use crate::redis::Command;
use crate::sale::{Terms, Ticket};

const VOUCHER: SaleId = SaleId::from_raw(7);
const BUYER: UserId = UserId::from_raw(3);
const PLACE: DrawPlace = DrawPlace::from_random(0x1234_5678_9abc_def0 << 64);

fn ticket() -> Ticket {
    Ticket::new(EPOCH + 10, 5)
}

fn entry() -> Entry {
    Entry {
        user: BUYER,
        ticket: ticket(),
    }
}

fn reply(values: &[&str]) -> Input {
    Input::Redis(Ok(values.iter().map(|v| Reply::text(v)).collect()))
}

/// Admission's reply: `tag`, the lead flag and the fields, as admission.lua writes them.
fn admission(tag: &str, lead: bool, rest: &[Reply]) -> Input {
    let mut values = vec![Reply::text(tag), Reply::Int(i64::from(lead))];
    values.extend_from_slice(rest);
    Input::Redis(Ok(values))
}

/// A bucket's `bucket_out`, with what it knows of the buckets sold out.
fn bucket_out(seen: &str) -> Input {
    admission("bucket_out", false, &[Reply::text(seen), Reply::Int(0)])
}

fn ticket_fields() -> [Reply; 3] {
    [
        Reply::Int(ticket().seconds()),
        Reply::Int(ticket().sequence()),
        Reply::Int(1),
    ]
}

fn script_of(io: &Io) -> &'static str {
    match io {
        Io::Redis(Command::Script { script, .. }) => script.name,
        Io::Redis(Command::Plain { name, .. }) => name,
        other => panic!("not Redis: {other:?}"),
    }
}

/// A lone buyer admitted and handed the lease over her own purchase, and what she
/// asks for next (its commit).
fn admitted_with_the_lease() -> (Purchase, Io) {
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let io = purchase.resume(admitted_leading());
    (purchase, io)
}

/// Admission's reply to a lone buyer: admitted, and holding the lease over her own
/// purchase, the first batch.
fn admitted_leading() -> Input {
    let mut lead = ticket_fields().to_vec();
    lead.extend([
        Reply::text(&entry().to_string()),
        Reply::text(&entry().to_string()),
    ]);
    admission("admitted", true, &lead)
}

/// MySQL's verdict on a batch of one: her order committed, the voucher's first.
fn ordered_once() -> Input {
    Input::Committed(Ok(Committed {
        verdicts: vec![Verdict::Ordered],
        ledger: Ledger {
            orders: 1,
            returned_event: 0,
            stock: 0,
        },
        created: 1,
    }))
}

/// The voucher a command names (its first key's hash tag).
fn bucket_of(io: &Io) -> String {
    let Io::Redis(Command::Script { keys, .. }) = io else {
        panic!("not a script: {io:?}")
    };
    keys[0].split(['{', '}']).nth(1).unwrap().to_string()
}

#[test]
fn a_press_learns_the_buckets_and_walks_them_from_the_buyer_s_until_all_are_out() {
    // Buyer 4 of three buckets (7, 8, 9): hers is the second (4 mod 3).
    let (mut purchase, io) = Purchase::start(VOUCHER, UserId::from_raw(4), 1, PLACE);
    assert_eq!(bucket_of(&io), "7");
    let io = purchase.resume(admission("buckets", false, &[Reply::text("8,9")]));
    assert_eq!(
        (script_of(&io), bucket_of(&io).as_str()),
        ("admission", "8")
    );
    assert_eq!(sightings_of(&io), ["3", "1", ""], "none gathered yet");
    // Each bucket asked hears what the ones before told her walk, each place at its
    // newest sighting.
    for (told, next, sightings) in [
        ("1:100,0:90", "9", ["3", "2", "1:100,0:90"]),
        ("2:150,0:95", "7", ["3", "0", "1:100,0:95,2:150"]),
    ] {
        let io = purchase.resume(bucket_out(told));
        assert_eq!(
            (script_of(&io), bucket_of(&io).as_str()),
            ("admission", next)
        );
        // Her bucket had no record of hers: the only walk of hers under way.
        assert_eq!(route_of(&io), "lone_walk");
        assert_eq!(sightings_of(&io), sightings);
    }
    // The last said so too: her own bucket hears that the walk it counted found
    // nothing, and answers for them all a moment; so does every other bucket, each
    // marked whatever the one before said.
    let io = purchase.resume(bucket_out(""));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    assert_eq!(walk_end_of(&io), (String::new(), "counted".to_string()));
    let mut io = purchase.resume(reply(&["marked"]));
    for (other, said) in [
        ("9", Ok(vec![Reply::text("open")])),
        ("7", Err(BackendError::Redis("down".into()))),
    ] {
        assert_eq!(
            (script_of(&io), bucket_of(&io).as_str()),
            ("walk_end", other)
        );
        assert_eq!(walk_end_of(&io), (String::new(), String::new()), "no buyer");
        io = purchase.resume(Input::Redis(said));
    }
    assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
    assert!(purchase.causes().is_empty(), "{:?}", purchase.causes());

    // Another walk marks them already: the first bucket marked before ends it.
    let (mut purchase, _) = buyer_4_of_three_buckets();
    purchase.resume(bucket_out(""));
    purchase.resume(bucket_out(""));
    purchase.resume(bucket_out(""));
    let io = purchase.resume(reply(&["marked"]));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "9"));
    let io = purchase.resume(reply(&["marked_before"]));
    assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
    let buckets = purchase.buckets().expect("learnt");
    assert_eq!(buckets.all(), [7, 8, 9].map(BucketId::from_raw));
}

/// Admission's route argument.
fn route_of(io: &Io) -> String {
    let Io::Redis(Command::Script { args, .. }) = io else {
        panic!("not a script: {io:?}")
    };
    args.get("route").expect("a route").to_string()
}

/// Admission's sightings (buckets, here, sightings): the sale's buckets, this one's place,
/// and what her walk gathered.
fn sightings_of(io: &Io) -> Vec<String> {
    let Io::Redis(Command::Script { args, .. }) = io else {
        panic!("not a script: {io:?}")
    };
    ["buckets", "here", "sightings"]
        .map(|name| args.get(name).expect(name).to_string())
        .to_vec()
}

/// What a walk_end.lua call tells her home: the bucket found, the pointer started from.
fn walk_end_of(io: &Io) -> (String, String) {
    let Io::Redis(Command::Script { args, .. }) = io else {
        panic!("not a script: {io:?}")
    };
    let named = |name| args.get(name).expect(name).to_string();
    (named("found"), named("started"))
}

/// What a walk_end.lua call says its walk's oldest sighting is (its `since`).
fn since_of(io: &Io) -> String {
    let Io::Redis(Command::Script { args, .. }) = io else {
        panic!("not a script: {io:?}")
    };
    args.get("since").expect("since").to_string()
}

fn three_buckets() -> Buckets {
    Buckets::new(VOUCHER, &[BucketId::from_raw(8), BucketId::from_raw(9)])
}

/// A press for one unit by buyer 4, whose bucket is 8, of a host that knows the sale's
/// three buckets.
fn buyer_4_of_three_buckets() -> (Purchase, Io) {
    Purchase::knowing(
        three_buckets(),
        UserId::from_raw(4),
        1,
        Limits::SHIPPED,
        PLACE,
    )
}

#[test]
fn a_walk_that_finds_her_purchase_points_her_bucket_at_it_first() {
    // Buyer 4's bucket is 8; 8 is sold out, 9 admits her.
    let (mut purchase, io) = buyer_4_of_three_buckets();
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("8", "home")
    );
    let io = purchase.resume(bucket_out(""));
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("9", "lone_walk")
    );
    let io = purchase.resume(admission("admitted", false, &ticket_fields()));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    assert_eq!(walk_end_of(&io), ("9".to_string(), "counted".to_string()));
    // Then on as admitted at 9: waiting for her verdict there.
    let io = purchase.resume(reply(&["pointed"]));
    assert_eq!((script_of(&io), purchase.bucket().raw()), ("BLPOP", 9));
}

#[test]
fn her_bucket_s_pointer_sends_her_press_to_her_purchase_past_marks_and_the_end() {
    let (mut purchase, _) = buyer_4_of_three_buckets();
    let io = purchase.resume(admission("walked", false, &[Reply::text("7")]));
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("7", "walk")
    );
    // Found there: no second pointer.
    let io = purchase.resume(admission("already_ordered", false, &[Reply::text("55")]));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::AlreadyOrdered {
            order_id: OrderId::from_raw(55)
        }))
    );

    // A pointer at a bucket that has nothing of hers any more: the rest of the ring,
    // then the pointer is cleared.
    let (mut purchase, _) = buyer_4_of_three_buckets();
    let io = purchase.resume(admission("walked", false, &[Reply::text("7")]));
    assert_eq!(bucket_of(&io), "7");
    let io = purchase.resume(admission("ended", false, &[]));
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("9", "walk")
    );
    let io = purchase.resume(bucket_out(""));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    assert_eq!(walk_end_of(&io), (String::new(), "w:7".to_string()));
    let io = purchase.resume(reply(&["open"]));
    assert_eq!(io, Io::Answer(Err(ApiError::Ended)), "a bucket said so");
}

#[test]
fn a_lone_walk_ends_at_a_bucket_marked_all_out_and_marks_her_bucket() {
    let (mut purchase, _) = buyer_4_of_three_buckets();
    let io = purchase.resume(bucket_out(""));
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("9", "lone_walk")
    );
    // 9 is marked (on sightings as old as 500): bucket 7 is not asked, and her bucket's
    // mark rests on what 9's did.
    let io = purchase.resume(admission("sold_out", false, &[Reply::text("1:500")]));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    assert_eq!(walk_end_of(&io), (String::new(), "counted".to_string()));
    assert_eq!(since_of(&io), "500");
    let io = purchase.resume(reply(&["marked"]));
    assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
}

#[test]
fn a_lone_walk_whose_press_marked_a_bucket_marks_the_others_but_that_one() {
    // Buyer 4: home 8, then 9, then 7, which her walk's sightings complete: it marked
    // itself, and tells her walk every bucket's sighting.
    let (mut purchase, _) = buyer_4_of_three_buckets();
    purchase.resume(bucket_out("1:100"));
    purchase.resume(bucket_out("1:100,2:110"));
    let io = purchase.resume(bucket_out("0:120,1:100,2:110"));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    // Each mark rests on the walk's oldest sighting.
    assert_eq!(since_of(&io), "100");
    let io = purchase.resume(reply(&["marked"]));
    // 7 marked itself: not asked again (a mark met ends the marking).
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "9"));
    assert_eq!(walk_end_of(&io), (String::new(), String::new()), "no buyer");
    assert_eq!(since_of(&io), "100");
    let io = purchase.resume(reply(&["marked"]));
    assert_eq!(io, Io::Answer(Err(ApiError::SoldOut)));
}

#[test]
fn a_walk_under_way_at_her_bucket_sends_her_press_round_every_bucket() {
    let (mut purchase, _) = buyer_4_of_three_buckets();
    let io = purchase.resume(admission("walk", false, &[Reply::Int(0), Reply::Int(0)]));
    assert_eq!(
        (bucket_of(&io).as_str(), route_of(&io).as_str()),
        ("9", "walk")
    );
    let io = purchase.resume(bucket_out(""));
    assert_eq!(bucket_of(&io), "7");
    let io = purchase.resume(admission("queued", false, &ticket_fields()));
    assert_eq!((script_of(&io), bucket_of(&io).as_str()), ("walk_end", "8"));
    assert_eq!(walk_end_of(&io), ("7".to_string(), "counted".to_string()));
}

#[test]
fn a_walk_that_finds_nothing_asks_her_bucket_again_when_it_holds_her_purchase_now() {
    let (mut purchase, _) = buyer_4_of_three_buckets();
    purchase.resume(bucket_out(""));
    purchase.resume(bucket_out(""));
    let io = purchase.resume(bucket_out(""));
    assert_eq!(script_of(&io), "walk_end");
    // Another press of hers was handed a unit given back at home meanwhile.
    let io = purchase.resume(reply(&["home"]));
    assert_eq!(
        (
            script_of(&io),
            bucket_of(&io).as_str(),
            route_of(&io).as_str()
        ),
        ("admission", "8", "home")
    );
    let io = purchase.resume(admission("queued", false, &ticket_fields()));
    assert_eq!((script_of(&io), purchase.bucket().raw()), ("count", 8));
    let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::Busy {
            retry_after_secs: 1
        }))
    );
}

#[test]
fn a_press_that_knows_the_buckets_buys_at_the_buyer_s_and_names_the_voucher() {
    let buckets = Buckets::new(VOUCHER, &[BucketId::from_raw(8)]);
    let (mut purchase, io) = Purchase::knowing(buckets, BUYER, 1, Limits::SHIPPED, PLACE);
    assert_eq!(bucket_of(&io), "8");
    let io = purchase.resume(admitted_leading());
    let order_id = ticket().order_id().unwrap();
    assert_eq!(io, Io::Commit(vec![(order_id, BUYER, 1)]));
    assert_eq!(purchase.bucket(), BucketId::from_raw(8), "commits there");
    purchase.resume(ordered_once());
    let receipt = purchase.receipt().expect("committed");
    assert_eq!(
        receipt.voucher_id, VOUCHER,
        "the voucher she bought, not its bucket"
    );
}

#[test]
fn another_bucket_s_order_is_already_ordered() {
    let (mut purchase, _) = admitted_with_the_lease();
    let held = OrderId::from_raw(77);
    purchase.resume(Input::Committed(Ok(Committed {
        verdicts: vec![Verdict::Elsewhere(held)],
        ledger: Ledger::default(),
        created: 0,
    })));
    let io = purchase.resume(reply(&["done", "0"]));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::AlreadyOrdered { order_id: held }))
    );
}

#[test]
fn another_bucket_s_dead_order_is_told_as_it_became() {
    let held = OrderId::from_raw(77);
    for (verdict, answer) in [
        (
            Verdict::Cancelled(held),
            ApiError::OrderCancelled { order_id: held },
        ),
        (
            Verdict::Expired(held),
            ApiError::OrderExpired { order_id: held },
        ),
    ] {
        let (mut purchase, _) = admitted_with_the_lease();
        purchase.resume(Input::Committed(Ok(Committed {
            verdicts: vec![verdict],
            ledger: Ledger::default(),
            created: 0,
        })));
        let io = purchase.resume(reply(&["done", "0"]));
        assert_eq!(io, Io::Answer(Err(answer)));
    }
}

#[test]
fn a_lone_buyer_drains_her_own_purchase_and_hears_201() {
    let (_, io) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    assert_eq!(script_of(&io), "admission");
    let (mut purchase, io) = admitted_with_the_lease();
    let order_id = ticket().order_id().unwrap();
    assert_eq!(io, Io::Commit(vec![(order_id, BUYER, 1)]));
    assert_eq!(purchase.receipt(), None, "nothing is committed yet");
    let io = purchase.resume(ordered_once());
    assert_eq!(script_of(&io), "publish");
    let receipt = Receipt {
        order_id,
        voucher_id: VOUCHER,
        user_id: BUYER,
        quantity: 1,
    };
    assert_eq!(
        purchase.receipt(),
        Some(receipt.clone()),
        "known before Redis"
    );
    let io = purchase.resume(reply(&["done", "0"]));
    assert_eq!(io, Io::Answer(Ok(receipt)));
}

/// A press told sold_out while handed the lease drains a batch whose unit goes back to
/// the bucket (its buyer's order is another bucket's): the publication's stock fits her,
/// and she presses again, and buys it.
#[test]
fn a_sold_out_drainer_whose_batch_gave_a_unit_back_presses_again() {
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let other = Entry {
        user: UserId::from_raw(4),
        ticket: ticket(),
    };
    let lease = [
        Reply::text(&other.to_string()),
        Reply::text(&other.to_string()),
    ];
    let io = purchase.resume(admission(
        "sold_out",
        true,
        &[&[Reply::text("")], &lease[..]].concat(),
    ));
    let order_id = ticket().order_id().unwrap();
    assert_eq!(io, Io::Commit(vec![(order_id, other.user, 1)]));
    let held = OrderId::from_raw(99);
    let io = purchase.resume(Input::Committed(Ok(Committed {
        verdicts: vec![Verdict::Elsewhere(held)],
        ledger: Ledger::default(),
        created: 0,
    })));
    assert_eq!(script_of(&io), "publish");
    // The publication left 1 unit: it fits her.
    let io = purchase.resume(reply(&["done", "1"]));
    assert_eq!(script_of(&io), "admission", "she presses again");
    let io = purchase.resume(admitted_leading());
    assert_eq!(io, Io::Commit(vec![(order_id, BUYER, 1)]));
}

#[test]
fn her_receipt_stands_when_the_publication_after_it_fails() {
    let (mut purchase, _) = admitted_with_the_lease();
    purchase.resume(ordered_once());
    let receipt = purchase.receipt().expect("committed");
    let io = purchase.resume(Input::Redis(Err(BackendError::Redis("gone".into()))));
    assert_eq!(io, Io::Answer(Ok(receipt)));
}

#[test]
fn a_buyer_refused_by_mysql_has_no_receipt() {
    let (mut purchase, _) = admitted_with_the_lease();
    let io = purchase.resume(Input::Committed(Ok(Committed {
        verdicts: vec![Verdict::SoldOut],
        ledger: Ledger::default(),
        created: 0,
    })));
    assert_eq!(script_of(&io), "publish");
    assert_eq!(purchase.receipt(), None);
}

#[test]
fn a_commit_failing_twice_leaves_her_purchase_queued_and_is_counted() {
    let (mut purchase, first) = admitted_with_the_lease();
    let again = purchase.resume(Input::Committed(Err(BackendError::Mysql("gone".into()))));
    assert_eq!(again, first, "tried again");
    let io = purchase.resume(Input::Committed(Err(BackendError::Mysql("gone".into()))));
    assert_eq!(
        script_of(&io),
        "unlock",
        "a drainer that gives up unlocks at once"
    );
    let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
    assert_eq!(script_of(&io), "count");
    let io = purchase.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::Unavailable(Unavailable::Mysql)))
    );
    assert_eq!(purchase.causes(), ["mysql: gone", "mysql: gone"]);
}

#[test]
fn a_waiter_hears_her_verdict_or_gives_up_busy() {
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let io = purchase.resume(admission("admitted", false, &ticket_fields()));
    assert_eq!(script_of(&io), "BLPOP");
    let done = purchase.clone().resume(reply(&[
        "key",
        r#"{"outcome":"duplicate","order":"99","units":1}"#,
    ]));
    assert_eq!(
        done,
        Io::Answer(Err(ApiError::AlreadyOrdered {
            order_id: OrderId::from_raw(99)
        }))
    );
    let mut io = io;
    for _ in 0..MAX_EMPTY_WAITS {
        assert_eq!(script_of(&io), "BLPOP");
        assert_eq!(
            script_of(&purchase.resume(Input::Redis(Ok(vec![Reply::Nil])))),
            "claim"
        );
        io = purchase.resume(reply(&["wait"]));
    }
    assert_eq!(script_of(&io), "count");
    let io = purchase.resume(Input::Redis(Err(BackendError::Redis("gone".into()))));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::Busy {
            retry_after_secs: 1
        }))
    );
    assert_eq!(purchase.causes(), ["counting busy: redis: gone"]);
}

#[test]
fn each_decision_of_admission_has_its_answer() {
    let order = Reply::text("42");
    let cases = [
        ("sold_out", vec![Reply::text("")], Err(ApiError::SoldOut)),
        ("ended", vec![], Err(ApiError::Ended)),
        ("not_started", vec![], Err(ApiError::NotStarted)),
        ("throttled", vec![], Err(ApiError::Throttled)),
        ("unknown", vec![], Err(ApiError::NotFound)),
        (
            "already_ordered",
            vec![order],
            Err(ApiError::AlreadyOrdered {
                order_id: OrderId::from_raw(42),
            }),
        ),
    ];
    for (tag, fields, answer) in cases {
        let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
        assert_eq!(
            purchase.resume(admission(tag, false, &fields)),
            Io::Answer(answer),
            "{tag}"
        );
    }
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let io = purchase.resume(admission("queued", false, &ticket_fields()));
    assert_eq!(
        script_of(&io),
        "count",
        "a second press while queued is busy"
    );
}

#[test]
fn missing_sale_state_asks_mysql_once_a_second() {
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let io = purchase.resume(admission("missing", false, &[]));
    assert_eq!(script_of(&io), "ask_mysql");
    let mut unknown = purchase.clone();
    let mut above = purchase.clone();
    assert_eq!(
        purchase.resume(Input::Redis(Ok(vec![Reply::text("wait")]))),
        Io::Answer(Err(not_loaded())),
        "another request asks MySQL this second"
    );
    assert_eq!(
        unknown.resume(Input::Redis(Ok(vec![Reply::text("ask")]))),
        Io::ReadVoucher
    );
    // Above the deployment's highest id (a cluster's slot that knew nothing): not
    // found without MySQL, and the slot learns the highest.
    let io = above.resume(Input::Redis(Ok(vec![
        Reply::text("unknown"),
        Reply::text("9"),
    ])));
    assert_eq!(script_of(&io), "probed");
    assert_eq!(
        above.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
        Io::Answer(Err(ApiError::NotFound))
    );
    let mut exists = unknown.clone();
    let highest = Some(VoucherId::from_raw(9));
    let io = unknown.resume(Input::Voucher(Ok(Lookup {
        terms: None,
        highest,
        ledger: Ledger::default(),
        spread: Spread::Whole,
        created: 0,
        unlisted: false,
        terms_version: 0,
    })));
    assert_eq!(script_of(&io), "probed");
    assert_eq!(
        unknown.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
        Io::Answer(Err(ApiError::NotFound))
    );
    let terms = Terms::sample(0, 1, 0, 1);
    let io = exists.resume(Input::Voucher(Ok(Lookup {
        terms: Some(terms),
        highest,
        ledger: Ledger::default(),
        spread: Spread::Whole,
        created: 0,
        unlisted: false,
        terms_version: 0,
    })));
    assert_eq!(script_of(&io), "load", "an ended sale is restored");
    let mut live = exists.clone();
    assert_eq!(
        exists.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
        Io::Answer(Err(ApiError::Ended))
    );
    assert_eq!(
        live.resume(Input::Redis(Ok(vec![Reply::Int(0)]))),
        Io::Answer(Err(not_loaded())),
        "a sale that has not ended waits for a sync"
    );
}

#[test]
fn an_unreadable_reply_is_a_503_with_its_cause() {
    let (mut purchase, _) = Purchase::start(VOUCHER, BUYER, 1, PLACE);
    let io = purchase.resume(reply(&["whatever"]));
    assert_eq!(
        io,
        Io::Answer(Err(ApiError::Unavailable(Unavailable::Redis)))
    );
    assert_eq!(purchase.causes().len(), 1);
}
