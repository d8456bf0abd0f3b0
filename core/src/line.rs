//! The sale's line as a buyer in it hears it (docs/design.md, "The line"): how many wait,
//! and how fast units came back since it opened, from which her wait is estimated.

/// The sale's line, beside a buyer's place in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineFigures {
    /// How many wait in it.
    pub length: u64,
    /// Units given back to the sale since the line opened.
    pub returned: u64,
    /// How long ago it opened, milliseconds.
    pub since_ms: i64,
}

impl LineFigures {
    /// About how long the buyer at `position` waits, in whole seconds, if units keep
    /// coming back at the pace they did since the line opened, one a place; `None` while
    /// none came back (no pace to go by).
    pub fn estimate_secs(&self, position: u64) -> Option<u64> {
        if self.returned == 0 || self.since_ms <= 0 {
            return None;
        }
        let ms = u128::from(position) * self.since_ms as u128 / u128::from(self.returned);
        Some(u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX))
    }

    /// What a buyer at `position` is told of her wait: her place (from 1), how many are
    /// ahead of her, the line's length, and the estimate (null while there is none).
    pub fn place(&self, position: u64) -> serde_json::Map<String, serde_json::Value> {
        let mut place = serde_json::Map::new();
        place.insert("position".into(), position.into());
        place.insert("ahead".into(), position.saturating_sub(1).into());
        place.insert("line_length".into(), self.length.into());
        place.insert("estimate_s".into(), self.estimate_secs(position).into());
        place
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_estimated_from_the_pace_units_came_back_at() {
        let line = |returned, since_ms| LineFigures {
            length: 10,
            returned,
            since_ms,
        };
        // 4 units in 60 s: one each 15 s, so the 3rd in line waits about 45 s.
        assert_eq!(line(4, 60_000).estimate_secs(3), Some(45));
        assert_eq!(line(3, 1_000).estimate_secs(1), Some(1));
        assert_eq!(line(0, 60_000).estimate_secs(1), None);
        assert_eq!(line(5, 0).estimate_secs(1), None);
        let place = line(4, 60_000).place(3);
        assert_eq!(
            serde_json::Value::Object(place),
            serde_json::json!({"position": 3, "ahead": 2, "line_length": 10, "estimate_s": 45})
        );
    }
}
