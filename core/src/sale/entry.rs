//! How the scripts name a purchase: its ticket, its queue entry and the buyer's record.

use std::fmt;

use crate::ids::{parse_id, UserId};
use crate::order_id::{LayoutError, OrderId};

/// An admitted purchase's place in the order sequence: the two halves of its order id,
/// as the admission script hands them out (Lua numbers are doubles and cannot hold the
/// 64-bit id itself), and the units it holds. Written `<unix seconds>:<sequence>`, and
/// `*<units>` after it for more than one unit. A sequence lost in a Redis restart can
/// hand one ticket out twice, so a purchase is named by its [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    seconds: i64,
    sequence: i64,
    units: u32,
}

impl Ticket {
    /// A ticket for one unit.
    pub fn new(seconds: i64, sequence: i64) -> Ticket {
        Ticket {
            seconds,
            sequence,
            units: 1,
        }
    }

    /// The same place in the sequence, for `units` units.
    pub fn for_units(self, units: u32) -> Ticket {
        Ticket { units, ..self }
    }

    pub fn units(self) -> u32 {
        self.units
    }

    pub fn order_id(self) -> Result<OrderId, LayoutError> {
        OrderId::compose(self.seconds, self.sequence)
    }

    pub fn seconds(self) -> i64 {
        self.seconds
    }

    pub fn sequence(self) -> i64 {
        self.sequence
    }

    pub fn parse(text: &str) -> Option<Ticket> {
        let (place, units) = parse_units(text)?;
        let (seconds, sequence) = place.split_once(':')?;
        Some(Ticket {
            seconds: seconds.parse().ok()?,
            sequence: sequence.parse().ok()?,
            units,
        })
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seconds, self.sequence)?;
        write_units(f, self.units)
    }
}

/// What a ticket or a record names after its place, or its order, for more than one unit
/// (`lua/records.lua`'s `UNITS`): `*<units>`.
const UNITS: char = '*';

/// `text`'s units, and `text` without them: one when it names none.
fn parse_units(text: &str) -> Option<(&str, u32)> {
    match text.split_once(UNITS) {
        None => Some((text, 1)),
        Some((rest, units)) => match units.parse() {
            Ok(units @ 2..) => Some((rest, units)),
            _ => None,
        },
    }
}

fn write_units(f: &mut fmt::Formatter<'_>, units: u32) -> fmt::Result {
    if units > 1 {
        write!(f, "{UNITS}{units}")?;
    }
    Ok(())
}

/// A queued purchase, `<user id>:<ticket>`: the buyer and her ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub user: UserId,
    pub ticket: Ticket,
}

impl Entry {
    pub fn parse(text: &str) -> Option<Entry> {
        let (user, ticket) = text.split_once(':')?;
        Some(Entry {
            user: UserId::from_raw(parse_id(user)?),
            ticket: Ticket::parse(ticket)?,
        })
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.user, self.ticket)
    }
}

/// The prefixes of the records of a buyer in a sale's `buyers` hash that Rust reads and
/// writes ([`Record`]), as `lua/records.lua` names them for every script (a unit test
/// holds the two together; the scripts alone keep the others).
const QUEUED: &str = "q:";
const ORDERED: &str = "o:";
const CANCELLED: &str = "c:";
const EXPIRED: &str = "x:";
const LOST: &str = "l:";

/// A buyer's record in the voucher's `buyers` hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Her purchase is queued with this ticket: it holds a unit.
    Queued(Ticket),
    /// Her order is committed, of these units.
    Ordered(OrderId, u32),
    /// Her order was cancelled; its unit went back to the sale.
    Cancelled(OrderId),
    /// Her order expired unpaid; its unit went back to the sale.
    Expired(OrderId),
    /// MySQL lost her order and could not take it again (`lua/heal.lua`): she holds none
    /// and may buy again.
    Lost(OrderId),
}

impl Record {
    /// The order the record is about; `None` while queued, or lost.
    pub fn order_id(self) -> Option<OrderId> {
        match self {
            Record::Queued(_) | Record::Lost(_) => None,
            Record::Ordered(order_id, _)
            | Record::Cancelled(order_id)
            | Record::Expired(order_id) => Some(order_id),
        }
    }

    pub fn parse(text: &str) -> Option<Record> {
        let (prefix, rest) = text.split_at_checked(2)?;
        match prefix {
            QUEUED => Ticket::parse(rest).map(Record::Queued),
            ORDERED => {
                let (order_id, units) = parse_units(rest)?;
                Some(Record::Ordered(OrderId::parse(order_id)?, units))
            }
            CANCELLED => OrderId::parse(rest).map(Record::Cancelled),
            EXPIRED => OrderId::parse(rest).map(Record::Expired),
            LOST => OrderId::parse(rest).map(Record::Lost),
            _ => None,
        }
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Queued(ticket) => write!(f, "{QUEUED}{ticket}"),
            Record::Ordered(order_id, units) => {
                write!(f, "{ORDERED}{order_id}")?;
                write_units(f, *units)
            }
            Record::Cancelled(order_id) => write!(f, "{CANCELLED}{order_id}"),
            Record::Expired(order_id) => write!(f, "{EXPIRED}{order_id}"),
            Record::Lost(order_id) => write!(f, "{LOST}{order_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_prefixes_are_those_the_scripts_name() {
        use std::collections::HashSet;

        let prelude = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/records.lua"));
        let named: Vec<(&str, &str)> = prelude
            .lines()
            .filter_map(|line| line.strip_prefix("local "))
            .filter_map(|line| {
                let (name, rest) = line.split_once(" = '")?;
                Some((name.trim(), rest.split_once('\'')?.0))
            })
            .collect();
        for record in [
            ("QUEUED", QUEUED),
            ("ORDERED", ORDERED),
            ("CANCELLED", CANCELLED),
            ("EXPIRED", EXPIRED),
            ("LOST", LOST),
            ("UNITS", "*"),
            ("REOPENED", crate::sale::REOPENED),
        ] {
            assert!(named.contains(&record), "{record:?} in {named:?}");
        }
        let prefixes: HashSet<&str> = named.iter().map(|(_, prefix)| *prefix).collect();
        assert_eq!(
            prefixes.len(),
            named.len(),
            "one prefix a record: {named:?}"
        );
    }

    #[test]
    fn entries_and_records_read_as_the_scripts_write_them() {
        let entry = Entry::parse("12:1704067210:3").unwrap();
        assert_eq!(entry.user, UserId::from_raw(12));
        assert_eq!(entry.to_string(), "12:1704067210:3");
        for bad in ["", "12", "12:1704067210", "0:1:2", "x:1:2", "12:1:x"] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
        let entry = Entry::parse("12:1704067210:3*4").unwrap();
        assert_eq!(entry.ticket.units(), 4);
        assert_eq!(entry.to_string(), "12:1704067210:3*4");
        for text in [
            "q:1704067210:3",
            "o:77",
            "c:78",
            "x:79",
            "q:1704067210:3*2",
            "o:77*10",
        ] {
            assert_eq!(Record::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Record::parse("o:77*3"),
            Some(Record::Ordered(OrderId::from_raw(77), 3))
        );
        for bad in [
            "", "q:", "o:0", "y:1", "q:1", "o:77*1", "o:77*", "q:1:2*0", "c:78*2",
        ] {
            assert_eq!(Record::parse(bad), None, "{bad:?}");
        }
    }
}
