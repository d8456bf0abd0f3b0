//! How the scripts name a purchase: its ticket, its queue entry and the buyer's record.

use std::fmt;

use crate::ids::{parse_id, UserId};
use crate::order_id::{LayoutError, OrderId};

/// An admitted purchase's place in the order sequence: the two halves of its order id,
/// as the admission script hands them out (Lua numbers are doubles and cannot hold the
/// 64-bit id itself). Written `<unix seconds>:<sequence>`. A sequence lost in a Redis
/// restart can hand one ticket out twice, so a purchase is named by its [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    seconds: i64,
    sequence: i64,
}

impl Ticket {
    pub fn new(seconds: i64, sequence: i64) -> Ticket {
        Ticket { seconds, sequence }
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
        let (seconds, sequence) = text.split_once(':')?;
        Some(Ticket {
            seconds: seconds.parse().ok()?,
            sequence: sequence.parse().ok()?,
        })
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seconds, self.sequence)
    }
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
    /// Her order is committed.
    Ordered(OrderId),
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
            Record::Ordered(order_id) | Record::Cancelled(order_id) | Record::Expired(order_id) => {
                Some(order_id)
            }
        }
    }

    pub fn parse(text: &str) -> Option<Record> {
        let (prefix, rest) = text.split_at_checked(2)?;
        match prefix {
            QUEUED => Ticket::parse(rest).map(Record::Queued),
            ORDERED => OrderId::parse(rest).map(Record::Ordered),
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
            Record::Ordered(order_id) => write!(f, "{ORDERED}{order_id}"),
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
        for text in ["q:1704067210:3", "o:77", "c:78", "x:79"] {
            assert_eq!(Record::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "q:", "o:0", "y:1", "q:1"] {
            assert_eq!(Record::parse(bad), None, "{bad:?}");
        }
    }
}
