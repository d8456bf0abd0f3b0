//! Order ids: 64 bits, unique across instances, ordered by time.
//!
//! Bit 63 is 0, bits 32..63 hold seconds since [`EPOCH`], bits 0..32 the sequence from
//! Redis: the voucher's Redis Cluster slot (bits 18..32) and that slot's count within
//! the second (bits 0..18), so that ids stay unique across the primaries of a cluster. The admission script returns the two parts separately and the id is
//! assembled here, because Lua numbers are doubles and lose integers above 2^53.

use std::fmt;

use serde::{Serialize, Serializer};

/// 2024-01-01T00:00:00Z; 31 bits of seconds from here last until 2092.
pub const EPOCH: i64 = 1_704_067_200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderId(u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("time {0} is outside the order id's range")]
    Time(i64),
    #[error("sequence {0} does not fit in 32 bits")]
    Sequence(i64),
}

impl OrderId {
    pub fn compose(unix_seconds: i64, sequence: i64) -> Result<OrderId, LayoutError> {
        let seconds = unix_seconds - EPOCH;
        if !(0..1 << 31).contains(&seconds) {
            return Err(LayoutError::Time(unix_seconds));
        }
        if !(0..1 << 32).contains(&sequence) {
            return Err(LayoutError::Sequence(sequence));
        }
        Ok(OrderId(((seconds as u64) << 32) | sequence as u64))
    }

    pub fn from_raw(raw: u64) -> OrderId {
        OrderId(raw)
    }

    /// Parses a client-supplied id: canonical decimal digits of a positive 63-bit number.
    pub fn parse(text: &str) -> Option<OrderId> {
        crate::ids::parse_id(text)
            .filter(|raw| *raw <= i64::MAX as u64)
            .map(OrderId)
    }

    pub fn raw(self) -> u64 {
        self.0
    }

    /// The Redis Cluster slot of the voucher the order was admitted for.
    pub fn slot(self) -> u16 {
        ((self.0 >> 18) & 0x3fff) as u16
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Always a decimal string in JSON: JavaScript clients lose precision above 2^53.
impl Serialize for OrderId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_seconds_high_and_sequence_low() {
        let id = OrderId::compose(EPOCH + 5, 7).unwrap();
        assert_eq!(id.raw(), (5 << 32) | 7);
        let id = OrderId::compose(EPOCH + (1 << 31) - 1, (1 << 32) - 1).unwrap();
        assert_eq!(id.raw(), i64::MAX as u64);
    }

    #[test]
    fn later_seconds_sort_after_any_earlier_sequence() {
        let earlier = OrderId::compose(EPOCH + 100, (1 << 32) - 1).unwrap();
        let later = OrderId::compose(EPOCH + 101, 0).unwrap();
        assert!(later > earlier);
    }

    #[test]
    fn refuses_parts_that_do_not_fit() {
        assert_eq!(
            OrderId::compose(EPOCH - 1, 1),
            Err(LayoutError::Time(EPOCH - 1))
        );
        assert_eq!(
            OrderId::compose(EPOCH + (1 << 31), 1),
            Err(LayoutError::Time(EPOCH + (1 << 31)))
        );
        assert_eq!(
            OrderId::compose(EPOCH, 1 << 32),
            Err(LayoutError::Sequence(1 << 32))
        );
        assert_eq!(OrderId::compose(EPOCH, -1), Err(LayoutError::Sequence(-1)));
    }

    #[test]
    fn ids_above_2_pow_53_survive_json_as_strings() {
        let id = OrderId::compose(EPOCH + 90_000_000, 123_456_789).unwrap();
        assert!(id.raw() > 1 << 53);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{}\"", id.raw()));
    }

    #[test]
    fn parses_only_canonical_positive_63_bit_ids() {
        assert_eq!(OrderId::parse("42"), Some(OrderId(42)));
        assert_eq!(
            OrderId::parse("9223372036854775807"),
            Some(OrderId(i64::MAX as u64))
        );
        for bad in [
            "",
            "0",
            "042",
            "+1",
            "-1",
            "1e3",
            "9223372036854775808",
            "18446744073709551616",
            "٣",
        ] {
            assert_eq!(OrderId::parse(bad), None, "{bad:?}");
        }
    }
}
