//! Ids as they arrive in paths and tokens: every layer names buyers, sales and buckets,
//! and none of them needs another layer for it.

use std::fmt;

use serde::{Serialize, Serializer};

/// Parses an id from a path segment: canonical decimal digits of a positive u64, so that
/// "007", "+7" or "%37" never name the same resource as "7".
pub fn parse_id(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
    canonical.then(|| text.parse().ok()).flatten()
}

/// The ids of voucher rows: positive 63-bit integers (MySQL's BIGINT), numbers in JSON.
macro_rules! voucher_row_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u64);

        impl $name {
            /// Parses a path segment or a script's reply: canonical decimal digits of a
            /// positive 63-bit number.
            pub fn parse(text: &str) -> Option<$name> {
                parse_id(text)
                    .filter(|raw| *raw <= i64::MAX as u64)
                    .map($name)
            }

            /// An id MySQL handed out.
            pub const fn from_raw(raw: u64) -> $name {
                $name(raw)
            }

            pub fn raw(self) -> u64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_u64(self.0)
            }
        }
    };
}

voucher_row_id! {
    /// A sale: what a storefront sells and a buyer presses for, named by its first
    /// bucket's voucher row (docs/design.md, "Buckets"). A sale of one bucket is that
    /// bucket.
    SaleId
}

voucher_row_id! {
    /// A bucket: one voucher row and the one set of Redis keys (`sale::Keys`) holding its
    /// share of a sale's stock. Which sale a later bucket is of comes from its row
    /// (`buckets::Spread`), never from its id.
    BucketId
}

voucher_row_id! {
    /// A voucher row's id where it may be either a sale's or a later bucket's: the highest
    /// id MySQL handed out (any row's, held against ids asked for), and what a request's
    /// log names.
    VoucherId
}

impl SaleId {
    /// The sale's first bucket: the row the storefront names, and its keys.
    pub const fn first_bucket(self) -> BucketId {
        BucketId(self.0)
    }
}

impl From<SaleId> for VoucherId {
    fn from(sale: SaleId) -> VoucherId {
        VoucherId(sale.0)
    }
}

impl From<BucketId> for VoucherId {
    fn from(bucket: BucketId) -> VoucherId {
        VoucherId(bucket.0)
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
        assert_eq!(SaleId(7).first_bucket(), BucketId(7));
        assert_eq!(VoucherId::from(BucketId(7)), VoucherId(7));
    }
}
