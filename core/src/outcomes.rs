//! The outcomes of a purchase request as `GET /metrics` counts them, listed once: the
//! metrics handler writes a series for each from the start (a rate over a series that
//! appears late is wrong for its first minute), and the Prometheus test expects them.
//! `lua/admission.lua` counts its decisions under `purchase:<outcome>`; a queued
//! purchase's request counts what it met after admission through `lua/count.lua`.

use crate::error::{ApiError, Unavailable};

/// Every purchase outcome: admission's decisions, then what a queued purchase's request
/// met after it ([`AFTER_ADMISSION`]).
pub const PURCHASE_OUTCOMES: [&str; 18] = [
    "admitted",
    "queued",
    "already_ordered",
    // The opening draw's order of an entrant, told at her first press after it.
    "won",
    "cancelled",
    "expired",
    "sold_out",
    // Fewer units left than the press asked for (a sale of one bucket).
    "short",
    // A bucket of a sale of several found empty: the press went on to the next.
    "bucket_out",
    // Her bucket sent her to the bucket holding her purchase, or round every bucket while
    // a walk of hers is under way.
    "walked",
    "walk",
    // The opening draw: an entrant heard when it is drawn; a loser her place in line.
    "in_draw",
    "waitlisted",
    "ended",
    "not_started",
    "throttled",
    "busy",
    "unavailable",
];

/// The outcomes no script sees: a queued purchase's request counts them by the code of
/// the error it answers with.
pub fn after_admission() -> [&'static str; 2] {
    [
        ApiError::Busy {
            retry_after_secs: 0,
        }
        .code(),
        ApiError::Unavailable(Unavailable::Redis).code(),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The outcomes a script counts: its literal `count('x')`s, and the first element of
    /// every answer it hands to `reply` (which counts `answer[1]`), directly or through
    /// `walk`.
    fn counted_by(script: &str) -> BTreeSet<String> {
        let mut counted = BTreeSet::new();
        for opening in ["count('", "reply({'", "walk({'"] {
            for (at, _) in script.match_indices(opening) {
                let rest = &script[at + opening.len()..];
                let end = rest.find('\'').expect("a closing quote");
                counted.insert(rest[..end].to_string());
            }
        }
        counted
    }

    #[test]
    fn the_list_is_what_the_scripts_and_the_requests_count() {
        let admission = include_str!("../../lua/admission.lua");
        // Admission counts through `count` alone, and `reply` counts its answer's first
        // element; every other call of either names its outcome first, so the reading
        // above misses none.
        assert_eq!(admission.matches("'purchase:'").count(), 1);
        assert!(admission.contains(
            "local function count(outcome)\n  if line ~= 'look' then\n    redis.call('HINCRBY', metrics, 'purchase:' .. outcome, 1)"
        ));
        assert!(admission.contains("local function reply(answer, token)\n  count(answer[1])"));
        assert!(admission.contains("local function walk(answer)"));
        let calls = |name: &str| {
            admission.matches(&format!("{name}(")).count()
                - admission.matches(&format!("_{name}(")).count()
        };
        let literal = |opening: &str| admission.matches(opening).count();
        assert_eq!(
            calls("count"),
            literal("count('") + 2,
            "its definition and reply's"
        );
        assert_eq!(
            calls("reply"),
            literal("reply({'") + 2,
            "its definition and walk's"
        );
        assert_eq!(calls("walk"), literal("walk({'") + 1, "its definition");
        // The other scripts that write counters name no outcome of their own.
        for script in [
            include_str!("../../lua/publish.lua"),
            include_str!("../../lua/count.lua"),
        ] {
            assert!(!script.contains("'purchase:"));
        }

        let mut counted = counted_by(admission);
        // The answer of a look alone (`line` = "look"), which counts nothing.
        assert!(admission.contains("if line == 'look' then\n  return reply({'not_in_line'"));
        counted.remove("not_in_line");
        for outcome in after_admission() {
            assert!(
                counted.insert(outcome.to_string()),
                "{outcome} is counted twice"
            );
        }
        let listed: BTreeSet<String> = PURCHASE_OUTCOMES.iter().map(|o| o.to_string()).collect();
        assert_eq!(
            listed.len(),
            PURCHASE_OUTCOMES.len(),
            "no outcome listed twice"
        );
        assert_eq!(listed, counted);
    }
}
