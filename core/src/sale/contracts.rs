//! Each script's header (`lua/*.lua`: one `-- KEYS[i]` line a key, one `-- ARGV[i]`
//! line an argument) held against the command its Rust call builds: the same keys, in
//! the same order, and as many arguments as the header counts for the call's lists. A
//! script or a call changed alone fails here.

use std::collections::BTreeSet;

use crate::buckets::Spread;
use crate::ids::{UserId, VoucherId};
use crate::ledger::Ledger;
use crate::ledger::Returned;
use crate::order_id::{OrderId, EPOCH};
use crate::redis::Command;
use crate::verdict::Verdict;

use super::*;

const VOUCHER: VoucherId = VoucherId::from_raw(42);
const BUYER: UserId = UserId::from_raw(9);

/// What a header says of one script's arguments: the fixed ones, and for a list of `n`
/// items (`ARGV[a..b+cn]`) the arguments it takes, `c` each.
#[derive(Debug, Default)]
struct Header {
    /// `(index, template)` of each key, as `KEYS[i]  seckill:{<voucher>}:name` reads.
    keys: Vec<(usize, String)>,
    /// The highest fixed `ARGV[i]`.
    fixed: usize,
    /// A list's arguments: `(first index, per item)`; `None` per item for `ARGV[a..]`,
    /// whose items the header counts in words.
    list: Option<(usize, Option<usize>)>,
    /// The arguments after the list: the highest `ARGV[a+cn]`'s `a`.
    tail: usize,
}

fn header(source: &str) -> Header {
    let mut header = Header::default();
    for line in source.lines().take_while(|line| line.starts_with("--")) {
        let line = line.trim_start_matches("--").trim_start();
        if let Some(rest) = line.strip_prefix("KEYS[") {
            let (index, rest) = rest.split_once(']').expect("KEYS[i]");
            header
                .keys
                .push((index.parse().expect("KEYS index"), template(rest)));
        } else if let Some(rest) = line.strip_prefix("ARGV[") {
            let (index, _) = rest.split_once(']').expect("ARGV[i]");
            let index: String = index.chars().filter(|c| !c.is_whitespace()).collect();
            if let Ok(fixed) = index.parse::<usize>() {
                header.fixed = header.fixed.max(fixed);
            } else if let Some((first, last)) = index.split_once("..") {
                let first = first.parse().expect("ARGV[a..]");
                let per_item = last
                    .strip_suffix('n')
                    .and_then(|last| last.split_once('+'))
                    .map(|(_, per_item)| per_item.parse().expect("ARGV[a..b+cn]"));
                header.list = Some((first, per_item));
            } else {
                let (after, _) = index.split_once('+').expect("ARGV[a+cn]");
                header.tail = header.tail.max(after.parse().expect("ARGV[a+cn]"));
            }
        }
    }
    header
}

/// The key's template that starts `text` (after its spaces): up to the first space outside
/// a `<...>`, which may hold spaces (`<slot tag>`).
fn template(text: &str) -> String {
    let mut inside = false;
    text.trim_start()
        .chars()
        .take_while(|&c| {
            inside = match c {
                '<' => true,
                '>' => false,
                _ => inside,
            };
            inside || !c.is_whitespace()
        })
        .collect()
}

/// Whether `key` is what `template` names: each `<...>` of the template stands for a
/// non-empty run of the key's text.
fn names(template: &str, key: &str) -> bool {
    match template.find('<') {
        None => template == key,
        Some(start) => {
            let end = template[start..].find('>').expect("a closed <...>") + start;
            let (before, after) = (&template[..start], &template[end + 1..]);
            let Some(rest) = key.strip_prefix(before) else {
                return false;
            };
            (1..=rest.len())
                .any(|taken| rest.is_char_boundary(taken) && names(after, &rest[taken..]))
        }
    }
}

/// Holds `command`, built for a list of `items`, against its script's header; returns the
/// script's name.
fn holds(command: Command, items: usize) -> &'static str {
    let Command::Script { script, keys, args } = command else {
        panic!("not a script: {command:?}");
    };
    let name = script.name;
    let prelude = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/records.lua"));
    let own = std::fs::read_to_string(format!("{}/../lua/{name}.lua", env!("CARGO_MANIFEST_DIR")))
        .expect("the script's file");
    assert!(
        script.source.starts_with(prelude),
        "{name}: the records first"
    );
    assert!(script.source.ends_with(&own), "{name}: its own file last");
    let header = header(&own);
    let indexes: Vec<usize> = header.keys.iter().map(|(index, _)| *index).collect();
    assert_eq!(
        indexes,
        (1..=header.keys.len()).collect::<Vec<_>>(),
        "{name}.lua: KEYS[1..] in order"
    );
    assert_eq!(keys.len(), header.keys.len(), "{name}.lua: keys {keys:?}");
    for (key, (index, template)) in keys.iter().zip(&header.keys) {
        // A key all the vouchers of a slot share is the deployment's one on one Redis
        // (`Keys::shared_key`): the header names its cluster form.
        let single = template.replace("{<slot tag>}:", "");
        assert!(
            names(template, key) || names(&single, key),
            "{name}.lua: KEYS[{index}] is {template}, the call sends {key}"
        );
    }
    let expected = match header.list {
        None => header.fixed,
        Some((_, Some(per_item))) if header.tail > 0 => header.tail + per_item * items,
        Some((first, Some(per_item))) => first - 1 + per_item * items,
        Some((first, None)) => {
            assert!(
                args.len() >= first - 1,
                "{name}.lua: {} arguments",
                args.len()
            );
            return name;
        }
    };
    assert_eq!(
        args.len(),
        expected,
        "{name}.lua: ARGV for {items} items: {args:?}"
    );
    name
}

fn entry(sequence: i64) -> Entry {
    Entry {
        user: UserId::from_raw(sequence as u64),
        ticket: Ticket::new(EPOCH + 1, sequence),
    }
}

#[test]
fn every_call_sends_the_keys_and_arguments_its_script_s_header_names() {
    let mut held: BTreeSet<&str> = lists_held();
    let others = [VoucherId::from_raw(43), VoucherId::from_raw(44)];
    let calls = [
        Admit {
            voucher_id: VOUCHER,
            user: BUYER,
            limits: Limits::SHIPPED,
            route: Route::Home,
            draw_place: 1,
            sightings: Sightings::default(),
            units: 2,
        }
        .command(),
        Claim {
            voucher_id: VOUCHER,
            entry: entry(1),
        }
        .command(),
        Clear::creation(VOUCHER).command(),
        EndSale {
            voucher_id: VOUCHER,
        }
        .command(),
        Audit {
            voucher_id: VOUCHER,
            missing: 1,
            mysql: Ledger {
                returned_event: 2,
                orders: 4,
                stock: 5,
            },
            mark: 3,
        }
        .command(),
        Load {
            voucher_id: VOUCHER,
            installer: Installer::Creation,
            terms: &Terms::sample(3, 3, 1, 2),
            highest: VOUCHER,
            created: 1_700_000_000,
            ledger: Ledger::default(),
            spread: &Spread::First(others.to_vec()),
        }
        .command(),
        ReadFigures {
            voucher_id: VOUCHER,
        }
        .command(),
        Count {
            voucher_id: VOUCHER,
            counted: Counted::Paid,
        }
        .command(),
        AskMysql {
            voucher_id: VOUCHER,
            probe: true,
        }
        .command(),
        Probed {
            voucher_id: VOUCHER,
            absent: true,
            highest: Some(VOUCHER),
        }
        .command(),
        ReadHolding {
            voucher_id: VOUCHER,
            user: BUYER,
        }
        .command(),
        Unlock {
            voucher_id: VOUCHER,
            token: "t",
        }
        .command(),
        EndTurn {
            order_id: OrderId::compose(EPOCH + 1, 5).unwrap(),
            token: "t",
        }
        .command(),
        EndSweep {
            voucher_id: VOUCHER,
        }
        .command(),
        ReadView {
            voucher_id: VOUCHER,
        }
        .command(),
        WalkEnd {
            home: VOUCHER,
            buyer: BUYER,
            found: Some(others[0]),
            started: Some(Pointer::Counted),
            empty: true,
            since: 1_700_000_000_000,
        }
        .command(),
        MarkAllOut {
            bucket: VOUCHER,
            since: 1_700_000_000_000,
        }
        .command(),
        Reopen { bucket: VOUCHER }.command(),
        listings::raise("seckill:{7}:highest-voucher", &"42".into()).expect("a slot's"),
    ];
    held.extend(calls.into_iter().map(|command| holds(command, 0)));
    let scripts: BTreeSet<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua"))
            .expect("lua/")
            .map(|file| {
                file.expect("a file of lua/")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter_map(|file| file.strip_suffix(".lua").map(str::to_string))
            // Not a script: what every script starts with.
            .filter(|name| name != "records")
            .collect();
    let held: BTreeSet<String> = held.into_iter().map(str::to_string).collect();
    assert_eq!(held, scripts, "every script of lua/ is held against a call");
}

/// The calls that send a list, each for lists of several lengths: as many arguments as
/// the header counts for each.
fn lists_held() -> BTreeSet<&'static str> {
    let mut held = BTreeSet::new();
    for items in [0, 1, 3] {
        let batch: Vec<Published> = (0..items)
            .map(|i| {
                (
                    entry(i),
                    OrderId::from_raw(100 + i as u64),
                    Verdict::Ordered,
                )
            })
            .collect();
        let publish = Publish {
            voucher_id: VOUCHER,
            token: "t",
            own: Some(entry(0)),
            batch: &batch,
            mysql: Some(Ledger::default()),
            limits: Limits::SHIPPED,
        };
        held.insert(holds(publish.command(), items as usize));

        let returns: Vec<Returned> = (0..items as u64)
            .map(|i| Returned {
                event: i + 1,
                order_id: OrderId::from_raw(100 + i),
                user: UserId::from_raw(i),
                cancelled: i % 2 == 0,
                units: 1,
            })
            .collect();
        let restock = Restock {
            voucher_id: VOUCHER,
            returns: &returns,
            after: 0,
            swept: None,
        };
        held.insert(holds(restock.command(), items as usize));

        let unhealed: Vec<Unhealed> = (0..items as u64)
            .map(|i| Unhealed {
                user: UserId::from_raw(i),
                order_id: OrderId::from_raw(100 + i),
                verdict: Verdict::Ordered,
            })
            .collect();
        let heal = Heal {
            voucher_id: VOUCHER,
            cursor: None,
            restored: 0,
            unhealed: &unhealed,
        };
        held.insert(holds(heal.command(), items as usize));

        let buyers: Vec<(UserId, Record)> = (0..items as u64)
            .map(|i| {
                (
                    UserId::from_raw(i),
                    Record::Ordered(OrderId::from_raw(100 + i), 1),
                )
            })
            .collect();
        let stage = Stage {
            voucher_id: VOUCHER,
            token: "t",
            created: 1_700_000_000,
            buyers: &buyers,
        };
        held.insert(holds(stage.command(), items as usize));
    }
    held
}

#[test]
fn a_template_names_a_key_by_its_placeholders() {
    assert!(names("seckill:{<voucher>}:voucher", "seckill:{42}:voucher"));
    assert!(names(
        "seckill:{<voucher>}:done:<user id>:<ticket>",
        "seckill:{42}:done:9:1:7"
    ));
    assert!(!names("seckill:{<voucher>}:voucher", "seckill:{42}:buyers"));
    assert!(!names("seckill:{<voucher>}:voucher", "seckill:{}:voucher"));
}
