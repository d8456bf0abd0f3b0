//! The sale's line as a buyer in it hears it (docs/design.md, "The line"): how many wait,
//! and how fast units came back since it opened, from which her wait is estimated.

/// The shortest wait a buyer in line is asked to keep between two looks, seconds.
pub const LOOK_AGAIN_SECS: u64 = 3;
/// The longest, seconds: her place moves up as units come back, and she is told so soon.
pub const LOOK_AGAIN_MAX_SECS: u64 = 30;

/// The sale's line, beside a buyer's place in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineFigures {
    /// How many wait in it.
    pub length: u64,
    /// Units given back to the sale since the line opened.
    pub returned: u64,
    /// How long ago it opened, milliseconds.
    pub since_ms: i64,
    /// How long an order the line hands her waits for her payment, seconds.
    pub pay_within_s: u64,
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

    /// How long the buyer at `position` may wait before her next look, in whole seconds
    /// (`Retry-After`): a quarter of her estimated wait, or with none yet a second for each
    /// 500 ahead of her, from [`LOOK_AGAIN_SECS`] to [`LOOK_AGAIN_MAX_SECS`], and never more
    /// than a quarter of the sale's payment window, so that an order the line hands her
    /// between two looks leaves her most of its window to pay. The front of the line looks
    /// often, its back seldom: 100,000 buyers waiting make about 3,500 looks a second, not
    /// 33,000.
    pub fn look_again_secs(&self, position: u64) -> u64 {
        let wait = self
            .estimate_secs(position)
            .map_or(position / 500, |estimate| estimate / 4);
        let most = (self.pay_within_s / 4).clamp(LOOK_AGAIN_SECS, LOOK_AGAIN_MAX_SECS);
        wait.clamp(LOOK_AGAIN_SECS, most)
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
            pay_within_s: 900,
        };
        // 4 units in 60 s: one each 15 s, so the 3rd in line waits about 45 s.
        assert_eq!(line(4, 60_000).estimate_secs(3), Some(45));
        assert_eq!(line(3, 1_000).estimate_secs(1), Some(1));
        assert_eq!(line(0, 60_000).estimate_secs(1), None);
        assert_eq!(line(5, 0).estimate_secs(1), None);
        // A quarter of the estimate, else a second each 500 ahead, within 3 s to 30 s.
        assert_eq!(line(4, 60_000).look_again_secs(3), 11);
        assert_eq!(line(1, 60_000).look_again_secs(1_000), 30);
        assert_eq!(line(0, 0).look_again_secs(1), 3);
        assert_eq!(line(0, 0).look_again_secs(9_000), 18);
        // A short payment window keeps looks close: a quarter of it, 3 s at least.
        let short = LineFigures {
            pay_within_s: 40,
            ..line(0, 0)
        };
        assert_eq!(short.look_again_secs(9_000), 10);
        let shorter = LineFigures {
            pay_within_s: 4,
            ..line(0, 0)
        };
        assert_eq!(shorter.look_again_secs(9_000), 3);
        let place = line(4, 60_000).place(3);
        assert_eq!(
            serde_json::Value::Object(place),
            serde_json::json!({"position": 3, "ahead": 2, "line_length": 10, "estimate_s": 45})
        );
    }
}
