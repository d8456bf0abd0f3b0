//! A press's walk round a sale's buckets (docs/design.md, "Buckets"): from the buyer's
//! own bucket round the ring while each is sold out, what the walk tells her home
//! bucket when it ends, and the marks it leaves on the others.

use super::{Io, Purchase, State};
use crate::buckets::Buckets;
use crate::error::ApiError;
use crate::ids::BucketId;
use crate::redis::Command;
use crate::sale::{Admission, Call, Decision, MarkAllOut, Pointer, Sighting, Sightings, WalkEnd};

/// What a press's walk round a sale's buckets met so far (docs/design.md, "Buckets").
#[derive(Debug, Clone, Default)]
pub(super) struct Walk {
    /// How the walk started at her home bucket: undone there if it finds nothing.
    pub(super) started: Option<Pointer>,
    /// A bucket answered `ended`: the walk's answer if it finds nothing.
    pub(super) ended: bool,
    /// Her home had no record of hers when it sent her on this walk: no other walk of
    /// hers is under way, and no bucket holds a purchase of hers.
    pub(super) lone: bool,
    /// A bucket marked all out ended it: it did not see every bucket empty itself.
    pub(super) ended_by_mark: bool,
    /// What the buckets it asked knew of the sale's buckets sold out, each place at its
    /// newest sighting: each bucket it asks next hears of them ([`Sightings`]).
    pub(super) seen_out: Vec<Sighting>,
    /// Her home was asked again once, having come to hold her purchase while she walked.
    pub(super) asked_home_again: bool,
    /// The most units a bucket it asked had left, fewer than she asked for: her answer
    /// when it finds none with enough.
    pub(super) most_left: u64,
    /// The buckets it asked that marked themselves all out, having seen every bucket
    /// sold out: marking them again would end its marking of the others.
    pub(super) marked: Vec<BucketId>,
}

impl Walk {
    /// When the oldest sighting the walk rests on was made (a mark that ended it hands it
    /// its own): the marks it leaves last no longer after it (`lua/records.lua`). 0, which
    /// marks nothing, when it holds none.
    fn since(&self) -> i64 {
        self.seen_out.iter().map(|(_, at)| *at).min().unwrap_or(0)
    }
}

impl Purchase {
    /// Sends the press to the buyer's bucket of `buckets`.
    pub(super) fn route(&mut self, buckets: Buckets) -> Io {
        self.ring = buckets.ring(self.buyer);
        self.buckets = Some(buckets);
        self.bucket = self.ring.remove(0);
        self.home = Some(self.bucket);
        Io::Redis(self.admit().command())
    }

    /// On to the next bucket of the ring once this one is sold out; `None` after the last.
    pub(super) fn next_bucket(&mut self) -> Option<Io> {
        if self.ring.is_empty() {
            return None;
        }
        self.bucket = self.ring.remove(0);
        self.decision = None;
        self.state = State::Admitting;
        Some(Io::Redis(self.admit().command()))
    }

    /// Where this press is among the sale's buckets, and what its walk gathered.
    pub(super) fn sightings(&self) -> Sightings {
        let Some(buckets) = self.buckets.as_ref().filter(|_| self.home.is_some()) else {
            return Sightings::default();
        };
        let all = buckets.all();
        Sightings {
            buckets: all.len(),
            here: all
                .iter()
                .position(|bucket| *bucket == self.bucket)
                .unwrap_or(0),
            seen: self.walk.seen_out.clone(),
            created: buckets.created(),
        }
    }

    /// Takes in what a bucket told the walk: its sightings, each place at its newest, and
    /// whether it marked itself (it knew every bucket sold out).
    pub(super) fn heard(&mut self, admission: &Admission) {
        for &(place, at) in &admission.seen_out {
            match self
                .walk
                .seen_out
                .iter_mut()
                .find(|(known, _)| *known == place)
            {
                Some((_, newest)) => *newest = (*newest).max(at),
                None => self.walk.seen_out.push((place, at)),
            }
        }
        self.walk.most_left = self.walk.most_left.max(admission.left);
        let buckets = self
            .buckets
            .as_ref()
            .map_or(0, |buckets| buckets.all().len());
        if admission.decision == Decision::BucketOut && admission.seen_out.len() == buckets {
            self.walk.marked.push(self.bucket);
        }
    }

    /// Whether this press is walking: at a bucket of the sale other than the buyer's.
    pub(super) fn walking(&self) -> bool {
        self.home.is_some_and(|home| home != self.bucket)
    }

    /// A walk that found the buyer's record in this bucket points her home bucket at it
    /// first (unless it came here by that pointer), so that her later presses find it
    /// whatever her bucket's marks or the sale's end say.
    pub(super) fn pointer_at_home(&self, admission: &Admission) -> Option<Command> {
        let holds = matches!(
            admission.decision,
            Decision::Admitted(_)
                | Decision::Queued(_)
                | Decision::AlreadyOrdered(_)
                | Decision::Won(..)
                | Decision::Cancelled(_)
                | Decision::Expired(_)
        );
        if !holds || !self.walking() || self.walk.started == Some(Pointer::At(self.bucket)) {
            return None;
        }
        Some(self.walk_end(Some(self.bucket)).command())
    }

    /// The end of this press's walk, told to the buyer's home bucket.
    pub(super) fn walk_end(&self, found: Option<BucketId>) -> WalkEnd {
        WalkEnd {
            home: self.home.expect("a walk has a home"),
            buyer: self.buyer,
            found,
            started: self.walk.started,
            empty: self.walk.most_left == 0,
            since: self.walk.since(),
        }
    }

    /// On round the ring from a bucket with nothing for the buyer; after the last, her
    /// home bucket hears that the walk found nothing, and she hears `sold_out` (or
    /// `ended`, when a bucket said so; or how many units one bucket had, when one had
    /// fewer than she asked for).
    pub(super) fn walk_on(&mut self) -> Result<Io, ApiError> {
        if let Some(io) = self.next_bucket() {
            return Ok(io);
        }
        let answer = if self.walk.ended {
            ApiError::Ended
        } else if self.walk.most_left > 0 {
            ApiError::Short {
                left: self.walk.most_left,
            }
        } else {
            ApiError::SoldOut
        };
        if self.home.is_none() {
            return Err(answer);
        }
        self.state = State::EndingWalk(answer);
        Ok(Io::Redis(self.walk_end(None).command()))
    }

    /// Marks the next of `others` all out (but those the walk saw mark themselves), or
    /// answers once none is left.
    pub(super) fn mark_others(&mut self, answer: ApiError, mut rest: Vec<BucketId>) -> Io {
        rest.retain(|bucket| !self.walk.marked.contains(bucket));
        let Some(bucket) = rest.pop() else {
            return self.finish(Err(answer));
        };
        let marking = MarkAllOut {
            bucket,
            since: self.walk.since(),
        };
        self.state = State::MarkingOthers { answer, rest };
        Io::Redis(marking.command())
    }
}
