//! Each script's header (`lua/*.lua`: one `-- KEYS[i]` line a key, one `-- ARGV[i]  name`
//! line an argument) held against the command its Rust call builds: the same keys, in
//! the same order, and the same arguments by name, in the same order, so that two
//! arguments swapped in a call fail here whatever their types. And each script held to
//! its header: it binds every argument to a local of the header's name at its top and
//! reads none by number below, and reads a hash's fields by name (`hash_fields`,
//! records.lua). A script or a call changed alone fails here.

use std::collections::BTreeSet;

use crate::buckets::Spread;
use crate::ids::{BucketId, SaleId, UserId};
use crate::ledger::Ledger;
use crate::ledger::{ReturnKind, Returned};
use crate::order_id::{OrderId, EPOCH};
use crate::redis::{Arg, Command};
use crate::verdict::Verdict;

use super::*;

const VOUCHER: BucketId = BucketId::from_raw(42);
const BUYER: UserId = UserId::from_raw(9);

/// What a header says of one script's keys and arguments.
#[derive(Debug, Default)]
struct Header {
    /// `(index, template)` of each key, as `KEYS[i]  seckill:{<voucher>}:name` reads.
    keys: Vec<(usize, String)>,
    /// `(index, name)` of each argument, as `ARGV[i]  name  what it is` reads.
    args: Vec<(usize, String)>,
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
            let (index, rest) = rest.split_once(']').expect("ARGV[i]");
            let name = rest.split_whitespace().next().unwrap_or_default();
            assert!(is_name(name), "ARGV[{index}] names no argument: {line}");
            header
                .args
                .push((index.parse().expect("ARGV index"), name.to_string()));
        }
    }
    header
}

/// Whether `text` is a Lua name: what a local can be called.
fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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

/// The text of `lua/<path>`.
fn lua(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../lua/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("lua/{path}: {e}"))
}

/// Holds `command` against its script's header: the keys its templates name, and the
/// arguments its names, in order. Returns the script's name, or what differs.
fn check(command: &Command) -> Result<&'static str, String> {
    let Command::Script { script, keys, args } = command else {
        return Err(format!("not a script: {command:?}"));
    };
    let name = script.name;
    let prelude = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/records.lua"));
    let own = lua(&format!("{name}.lua"));
    if !script.source.starts_with(prelude) {
        return Err(format!("{name}: the records first"));
    }
    if !script.source.ends_with(&own) {
        return Err(format!("{name}: its own file last"));
    }
    let header = header(&own);
    for (what, indexes) in [
        (
            "KEYS",
            header
                .keys
                .iter()
                .map(|(index, _)| *index)
                .collect::<Vec<_>>(),
        ),
        (
            "ARGV",
            header.args.iter().map(|(index, _)| *index).collect(),
        ),
    ] {
        if indexes != (1..=indexes.len()).collect::<Vec<_>>() {
            return Err(format!("{name}.lua: {what}[1..] in order, not {indexes:?}"));
        }
    }
    if keys.len() != header.keys.len() {
        return Err(format!("{name}.lua: keys {keys:?}"));
    }
    for (key, (index, template)) in keys.iter().zip(&header.keys) {
        // A key all the vouchers of a slot share is the deployment's one on one Redis
        // (`Keys::shared_key`): the header names its cluster form.
        let single = template.replace("{<slot tag>}:", "");
        if !(names(template, key) || names(&single, key)) {
            return Err(format!(
                "{name}.lua: KEYS[{index}] is {template}, the call sends {key}"
            ));
        }
    }
    let expected: Vec<&str> = header.args.iter().map(|(_, arg)| arg.as_str()).collect();
    let sent: Vec<&str> = args.names().collect();
    if sent != expected {
        let first = sent
            .iter()
            .zip(&expected)
            .position(|(sent, expected)| sent != expected)
            .unwrap_or(sent.len().min(expected.len()));
        return Err(format!(
            "{name}.lua: ARGV[{}] is {:?}, the call sends {:?} there ({} arguments, the header names {})",
            first + 1,
            expected.get(first),
            sent.get(first),
            sent.len(),
            expected.len()
        ));
    }
    Ok(name)
}

/// Holds `command` against its script's header (see [`check`]); returns the script's name.
fn holds(command: Command) -> &'static str {
    check(&command).unwrap_or_else(|differs| panic!("{differs}"))
}

fn entry(sequence: i64) -> Entry {
    Entry {
        user: UserId::from_raw(sequence as u64),
        ticket: Ticket::new(EPOCH + 1, sequence),
    }
}

/// `view.lua`'s header lists its reply's fields (`Returns {a, b, ...}`) as [`VIEW_REPLY`]
/// names them, and its `return` gives as many.
#[test]
fn the_view_s_reply_is_read_by_the_names_its_header_gives() {
    let source = lua("view.lua");
    let header: String = source
        .lines()
        .take_while(|line| line.starts_with("--"))
        .map(|line| line.trim_start_matches("--").trim())
        .collect::<Vec<_>>()
        .join(" ");
    let listed = header
        .split_once("Returns {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .expect("a Returns {...} line")
        .0;
    let names: Vec<&str> = listed.split(',').map(str::trim).collect();
    assert_eq!(names, view::VIEW_REPLY);
    let returned = source
        .rsplit_once("\nreturn {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .expect("a last return {...}")
        .0;
    assert_eq!(returned.split(',').count(), view::VIEW_REPLY.len());
}

#[test]
fn every_call_sends_the_keys_and_arguments_its_script_s_header_names() {
    let mut held: BTreeSet<&str> = lists_held();
    let others = [BucketId::from_raw(43), BucketId::from_raw(44)];
    let calls = [
        admit(),
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
            highest: VOUCHER.into(),
            created: 1_700_000_000,
            ledger: Ledger::default(),
            spread: &Spread::First(others.to_vec()),
            terms_version: 4,
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
            highest: Some(VOUCHER.into()),
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
        Leave {
            sale: SaleId::from_raw(42),
            user: BUYER,
        }
        .command(),
        Raise {
            highest: &"42".into(),
        }
        .command(),
        ChangeTerms {
            voucher_id: VOUCHER,
            terms: &Terms::sample(3, 3, 1, 2),
            terms_version: 2,
            returned_event: 5,
        }
        .command(),
    ];
    held.extend(calls.into_iter().map(holds));
    let scripts: BTreeSet<String> = scripts().into_iter().collect();
    let held: BTreeSet<String> = held.into_iter().map(str::to_string).collect();
    assert_eq!(held, scripts, "every script of lua/ is held against a call");
}

/// The calls that send a list (a JSON array, one argument), each for lists of several
/// lengths.
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
        held.insert(holds(publish.command()));

        let returns: Vec<Returned> = (0..items as u64)
            .map(|i| {
                let (order_id, user) = (OrderId::from_raw(100 + i), UserId::from_raw(i));
                let kind = match i % 3 {
                    0 => ReturnKind::Cancelled { order_id, user },
                    1 => ReturnKind::Expired { order_id, user },
                    _ => ReturnKind::Restocked,
                };
                Returned {
                    event: i + 1,
                    kind,
                    units: 1,
                }
            })
            .collect();
        let restock = Restock {
            voucher_id: VOUCHER,
            returns: &returns,
            after: 0,
            swept: None,
        };
        held.insert(holds(restock.command()));

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
        held.insert(holds(heal.command()));

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
        held.insert(holds(stage.command()));
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

fn admit() -> Command {
    Admit {
        voucher_id: VOUCHER,
        user: BUYER,
        limits: Limits::SHIPPED,
        route: Route::Home,
        draw_place: 1,
        sightings: Sightings::default(),
        units: 2,
        line: LineAsk::Join,
    }
    .command()
}

/// `command` with its arguments `a` and `b` (0-based) swapped, as a call that listed
/// them the other way round builds it.
fn swapped(command: Command, a: usize, b: usize) -> Command {
    let Command::Script { script, keys, args } = command else {
        panic!("a script")
    };
    let mut args: Vec<(&'static str, Arg)> = args
        .iter()
        .map(|(name, value)| (name, value.clone()))
        .collect();
    args.swap(a, b);
    Command::script(script, keys, args.into_iter().collect())
}

#[test]
fn a_call_that_swaps_two_arguments_fails_its_script_s_header() {
    assert_eq!(check(&admit()), Ok("admission"));
    // The lease's lifetime (ARGV[2]) and the batch's size (ARGV[3]): two integers, as
    // many arguments as before, so only their names tell the swap.
    let swap = swapped(admit(), 1, 2);
    let Command::Script { args, .. } = &swap else {
        unreachable!()
    };
    assert_eq!(args.len(), header(&lua("admission.lua")).args.len());
    assert!(matches!(
        (args.get("lease_ms"), args.get("batch_size")),
        (Some(Arg::Int(_)), Some(Arg::Int(_)))
    ));
    assert_eq!(
        check(&swap),
        Err(
            "admission.lua: ARGV[2] is Some(\"lease_ms\"), the call sends Some(\"batch_size\") \
             there (22 arguments, the header names 22)"
                .to_string()
        )
    );
    // Two strings of another script: the buyer's id and her ticket.
    let claim = Claim {
        voucher_id: VOUCHER,
        entry: entry(1),
    }
    .command();
    assert_eq!(check(&claim), Ok("claim"));
    assert!(check(&swapped(claim, 0, 1)).is_err());
}

/// Lines of a script's code, comments taken out: `(line number, code)`.
type Code<'a> = Vec<(usize, &'a str)>;

/// A script's code after its header.
fn code(source: &str) -> Code<'_> {
    source
        .lines()
        .enumerate()
        .skip_while(|(_, line)| line.starts_with("--"))
        .map(|(at, line)| (at + 1, line.split("--").next().unwrap_or_default()))
        .collect()
}

/// The script's bindings of its keys and arguments: the `local` statements right after
/// its header (a statement goes on over the indented lines under it), each binding
/// `KEYS[i]` or `ARGV[i]` as it is or through one function (`tonumber(ARGV[2])`). Returns
/// each `(i, name)` an `ARGV[i]` is bound to, in order, and the code after the bindings.
fn bindings<'a>(code: &[(usize, &'a str)]) -> (Vec<(usize, String)>, Code<'a>) {
    let mut bound = Vec::new();
    let mut at = 0;
    loop {
        while code.get(at).is_some_and(|(_, line)| line.trim().is_empty()) {
            at += 1;
        }
        let Some((_, first)) = code.get(at) else {
            break;
        };
        let Some(statement) = first.strip_prefix("local ") else {
            break;
        };
        let mut end = at + 1;
        let mut text = statement.to_string();
        while let Some((_, more)) = code.get(end).filter(|(_, line)| line.starts_with(' ')) {
            text.push(' ');
            text.push_str(more.trim());
            end += 1;
        }
        let Some(args) = binding(&text) else {
            break;
        };
        bound.extend(args);
        at = end;
    }
    (bound, code[at..].to_vec())
}

/// The `ARGV[i]` a `names = values` statement binds, `(i, name)`; `None` when it binds
/// anything else than keys and arguments.
fn binding(statement: &str) -> Option<Vec<(usize, String)>> {
    let (names, values) = statement.split_once(" = ")?;
    let names: Vec<&str> = names.split(',').map(str::trim).collect();
    // The values, split at the commas outside parentheses.
    let mut parts: Vec<String> = vec![String::new()];
    let mut depth = 0;
    for c in values.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        parts.last_mut().expect("one at least").push(c);
    }
    if names.len() != parts.len() {
        return None;
    }
    let mut args = Vec::new();
    for (name, value) in names.iter().zip(&parts) {
        let value = value.trim();
        // Through one function: `tonumber(...)`, `cjson.decode(...)`.
        let inner = match value.split_once('(') {
            Some((function, inner)) if function.split('.').all(is_name) => {
                inner.strip_suffix(')')?
            }
            _ => value,
        };
        let (table, index) = inner.strip_suffix(']')?.split_once('[')?;
        let index: usize = index.parse().ok()?;
        match table {
            "KEYS" => {}
            "ARGV" => args.push((index, name.to_string())),
            _ => return None,
        }
    }
    Some(args)
}

/// Each script of lua/ by name, in order: not records.lua, what every script starts with,
/// nor a script's parts.
fn scripts() -> Vec<String> {
    let mut scripts: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua"))
            .expect("lua/")
            .map(|file| {
                file.expect("a file of lua/")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter_map(|file| file.strip_suffix(".lua").map(str::to_string))
            .filter(|name| name != "records")
            .collect();
    scripts.sort();
    scripts
}

/// Every Lua file: records.lua, each script's parts (lua/<script>/*.lua) and each script.
fn lua_files() -> Vec<String> {
    let mut files = vec!["records.lua".to_string()];
    for script in scripts() {
        if let Ok(parts) =
            std::fs::read_dir(format!("{}/../lua/{script}", env!("CARGO_MANIFEST_DIR")))
        {
            let mut parts: Vec<String> = parts
                .map(|part| {
                    let part = part.expect("a part").file_name();
                    format!("{script}/{}", part.to_string_lossy())
                })
                .collect();
            parts.sort();
            files.extend(parts);
        }
        files.push(format!("{script}.lua"));
    }
    files
}

#[test]
fn every_script_binds_its_arguments_by_their_header_s_names_and_reads_none_below() {
    let scripts = scripts();
    assert!(scripts.len() >= 20, "{scripts:?}");
    for script in scripts {
        let source = lua(&format!("{script}.lua"));
        let header = header(&source);
        let (bound, below) = bindings(&code(&source));
        assert_eq!(
            bound, header.args,
            "{script}.lua: its bindings are the header's ARGV, by name and in order"
        );
        for (line, code) in below {
            assert!(
                !code.contains("ARGV"),
                "{script}.lua:{line}: ARGV below the bindings: {code}"
            );
        }
    }
    // What a script starts with reads no argument of its own.
    for file in lua_files()
        .into_iter()
        .filter(|file| file.contains('/') || file == "records.lua")
    {
        for (line, code) in code(&lua(&file)) {
            assert!(!code.contains("ARGV"), "{file}:{line}: {code}");
        }
    }
}

#[test]
fn the_binding_of_arguments_is_read_as_scripts_write_it() {
    let source = "-- x.lua\n-- ARGV[1]  user  her id\n\nlocal voucher = KEYS[1]\n\
                  local user, lease_ms =\n  ARGV[1], tonumber(ARGV[2])\n\
                  local state = hash_fields(voucher, {'stock'})\nreturn ARGV[3]\n";
    let (bound, below) = bindings(&code(source));
    assert_eq!(bound, [(1, "user".into()), (2, "lease_ms".into())]);
    assert_eq!(below.first().map(|(line, _)| *line), Some(7));
    assert_eq!(below.last(), Some(&(8, "return ARGV[3]")));
    assert_eq!(
        binding("x = cjson.decode(ARGV[4])"),
        Some(vec![(4, "x".into())])
    );
    assert_eq!(binding("x = redis.call('GET', KEYS[1])"), None);
    assert_eq!(binding("x, y = ARGV[1]"), None);
}

#[test]
fn no_script_reads_a_hash_s_fields_by_number() {
    for file in lua_files() {
        let source = lua(&file);
        let code = code(&source);
        let hmget = code
            .iter()
            .filter(|(_, code)| code.contains("HMGET"))
            .count();
        let expected = usize::from(file == "records.lua");
        assert_eq!(
            hmget, expected,
            "{file}: HMGET only in records.lua's hash_fields, which reads the fields by name"
        );
        // What hash_fields read, never indexed by number: `state[1]`.
        let read: Vec<&str> = code
            .iter()
            .filter_map(|(_, code)| code.split_once("= hash_fields(").map(|(name, _)| name))
            .map(|name| name.trim().trim_start_matches("local ").trim())
            .collect();
        for name in read {
            assert!(
                is_name(name),
                "{file}: one name for a hash's fields: {name}"
            );
            let indexed = format!("{name}[");
            for (line, code) in &code {
                for (at, _) in code.match_indices(&indexed) {
                    let after = &code[at + indexed.len()..];
                    assert!(
                        !after.starts_with(|c: char| c.is_ascii_digit()),
                        "{file}:{line}: {name} read by number: {code}"
                    );
                }
            }
        }
    }
    let records = lua("records.lua");
    let helper = records
        .split("local function hash_fields(")
        .nth(1)
        .expect("records.lua's hash_fields");
    assert!(helper.split("\nend").next().unwrap().contains("'HMGET'"));
}
