//! Ids as they arrive in paths and tokens: every layer names buyers and vouchers, and
//! none of them needs another layer for it.

use std::fmt;

use serde::{Serialize, Serializer};

/// Parses an id from a path segment: canonical decimal digits of a positive u64, so that
/// "007", "+7" or "%37" never name the same resource as "7".
pub fn parse_id(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
    canonical.then(|| text.parse().ok()).flatten()
}

/// A voucher's id: a positive 63-bit integer (MySQL's BIGINT), a number in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VoucherId(u64);

impl VoucherId {
    /// Parses a path segment: canonical decimal digits of a positive 63-bit number.
    pub fn parse(text: &str) -> Option<VoucherId> {
        parse_id(text)
            .filter(|raw| *raw <= i64::MAX as u64)
            .map(VoucherId)
    }

    /// An id MySQL handed out.
    pub const fn from_raw(raw: u64) -> VoucherId {
        VoucherId(raw)
    }

    pub fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for VoucherId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for VoucherId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

/// A buyer's user id: a positive 64-bit integer, a decimal string in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UserId(u64);

impl UserId {
    pub const fn from_raw(raw: u64) -> UserId {
        UserId(raw)
    }

    pub fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for UserId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_canonical_positive_decimals() {
        assert_eq!(parse_id("1"), Some(1));
        assert_eq!(parse_id("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "0",
            "01",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "0x1",
            "%31",
            "18446744073709551616",
        ] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn voucher_ids_are_positive_63_bit_decimals_and_json_numbers() {
        let id = VoucherId::parse("9223372036854775807").unwrap();
        assert_eq!(id.raw(), i64::MAX as u64);
        assert_eq!(VoucherId::parse("9223372036854775808"), None);
        assert_eq!(VoucherId::parse("0"), None);
        assert_eq!(serde_json::to_string(&VoucherId(7)).unwrap(), "7");
    }
}
