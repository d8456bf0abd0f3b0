//! One command's way through a Redis Cluster, as a state machine: told what each node
//! answered, it says where the command goes next, when to wait, when to read the slot
//! map again, and when to give up. `src/storage/redis.rs` does what it says (sends, waits, reads
//! the map); nothing here does I/O.
//!
//! - `MOVED`: the map is read again from the node it names, and the command goes there.
//! - `ASK`: the command goes to the node it names, right after `ASKING`.
//! - `TRYAGAIN`: a slot mid-migration whose keys are not all on one side. A script
//!   declares keys that may not exist (`absent`, `entrants`), so a node importing the
//!   slot refuses it even after `ASKING` until the migration ends: the command waits and
//!   goes again to the node that refused it, as it went there (after `ASKING` if it
//!   did), for as long as [`PATIENCE`] allows.
//! - `CLUSTERDOWN`: waits, reads the map again, and goes to the slot's primary.
//! - Anything else (a node that failed, or a command's own error): the map is read again
//!   and the command goes to the slot's new primary if it has one (a failover done);
//!   else it fails (a failed primary's buyers hear `503` until its replica takes over).
//!
//! Redirects are counted between two waits: more than [`HOPS`] in a row (nodes sending a
//! command back and forth while their views of a slot disagree) make it wait too, and
//! read the map again, rather than fail within milliseconds.

use std::time::Duration;

use super::Redirect;

/// Most redirects one command follows between two waits.
pub const HOPS: u32 = 5;
/// How long a command waits in all, over its waits: a buyer would rather wait than hear
/// `503` while a slot moves (a reshard paced a batch of keys at a time holds a slot
/// mid-migration for a second or more).
pub const PATIENCE: Duration = Duration::from_secs(3);
/// The first wait, doubled each time up to [`LONGEST_WAIT`].
pub const FIRST_WAIT: Duration = Duration::from_millis(2);
pub const LONGEST_WAIT: Duration = Duration::from_millis(100);

/// What to do next for the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send it to `node` (`host:port`), right after `ASKING` on the same connection when
    /// `asking`; then [`Delivery::failed`] if it fails.
    Send { node: String, asking: bool },
    /// Wait this long, then [`Delivery::waited`].
    Wait(Duration),
    /// Read the slot map again (from `from` first when named, else from the seeds), keep
    /// it, then [`Delivery::mapped`] with the primary it names for the command's slot.
    ReadMap { from: Option<String> },
    /// Stop: the command's failure is what the last node answered.
    GiveUp,
}

/// Where a command is on its way.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Where it went last, and whether right after `ASKING`.
    node: String,
    asking: bool,
    /// Redirects followed since the last wait.
    hops: u32,
    next_wait: Duration,
    waited: Duration,
    /// What the step under way is for.
    then: Then,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    /// Nothing: the command is out.
    Answer,
    /// Once the map is read: send it to the node a `MOVED` named.
    Moved(String),
    /// Once the map is read: send it to the slot's primary if that is another node.
    Failover,
    /// After the wait: send it again as it went.
    Resend,
    /// After the wait: read the map, then send it to the slot's primary.
    Restart,
}

impl Delivery {
    /// A command whose slot `owner` serves, by the map at hand: the first step sends it
    /// there.
    pub fn start(owner: String) -> (Delivery, Step) {
        let route = Delivery {
            node: owner,
            asking: false,
            hops: 0,
            next_wait: FIRST_WAIT,
            waited: Duration::ZERO,
            then: Then::Answer,
        };
        let step = route.send();
        (route, step)
    }

    /// The node the command went to last.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The command failed: with `redirect` when the node answered one, `None` when it
    /// failed otherwise (unreachable, reset, or the command's own error).
    pub fn failed(&mut self, redirect: Option<Redirect>) -> Step {
        match redirect {
            Some(Redirect::Moved { node, .. }) => self.hop(|route| {
                route.then = Then::Moved(node.clone());
                Step::ReadMap { from: Some(node) }
            }),
            Some(Redirect::Ask { node, .. }) => self.hop(|route| {
                route.go(node, true);
                route.send()
            }),
            Some(Redirect::TryAgain) => self.wait(Then::Resend),
            Some(Redirect::ClusterDown) => self.wait(Then::Restart),
            None => {
                self.then = Then::Failover;
                Step::ReadMap { from: None }
            }
        }
    }

    /// The wait is over.
    pub fn waited(&mut self) -> Step {
        self.hops = 0;
        match std::mem::replace(&mut self.then, Then::Answer) {
            Then::Resend => self.send(),
            _ => {
                self.then = Then::Restart;
                Step::ReadMap { from: None }
            }
        }
    }

    /// The map is read: `owner` is the primary it names for the command's slot (`None`
    /// when it could not be read, or names none).
    pub fn mapped(&mut self, owner: Option<String>) -> Step {
        match std::mem::replace(&mut self.then, Then::Answer) {
            Then::Moved(node) => {
                self.go(node, false);
                self.send()
            }
            Then::Failover => match owner.filter(|owner| *owner != self.node) {
                Some(owner) => self.hop(|route| {
                    route.go(owner, false);
                    route.send()
                }),
                None => Step::GiveUp,
            },
            _ => match owner {
                Some(owner) => {
                    self.go(owner, false);
                    self.send()
                }
                // No primary serves the slot yet (a failover under way): as `CLUSTERDOWN`.
                None => self.wait(Then::Restart),
            },
        }
    }

    fn send(&self) -> Step {
        Step::Send {
            node: self.node.clone(),
            asking: self.asking,
        }
    }

    fn go(&mut self, node: String, asking: bool) {
        self.node = node;
        self.asking = asking;
    }

    /// Follows a redirect with `follow`, unless it is one too many since the last wait.
    fn hop(&mut self, follow: impl FnOnce(&mut Delivery) -> Step) -> Step {
        if self.hops == HOPS {
            return self.wait(Then::Restart);
        }
        self.hops += 1;
        follow(self)
    }

    /// Waits, then does `then`; gives up once the waits have reached [`PATIENCE`].
    fn wait(&mut self, then: Then) -> Step {
        if self.waited >= PATIENCE {
            return Step::GiveUp;
        }
        let wait = self.next_wait;
        self.waited += wait;
        self.next_wait = (wait * 2).min(LONGEST_WAIT);
        self.then = then;
        Step::Wait(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "127.0.0.1:7101";
    const TARGET: &str = "127.0.0.1:7102";
    const REPLICA: &str = "127.0.0.1:7104";

    fn send(node: &str, asking: bool) -> Step {
        Step::Send {
            node: node.into(),
            asking,
        }
    }

    fn moved(node: &str) -> Option<Redirect> {
        Some(Redirect::Moved {
            slot: 42,
            node: node.into(),
        })
    }

    fn ask(node: &str) -> Option<Redirect> {
        Some(Redirect::Ask {
            slot: 42,
            node: node.into(),
        })
    }

    fn read_from(node: Option<&str>) -> Step {
        Step::ReadMap {
            from: node.map(str::to_string),
        }
    }

    /// A command the slot's owner refused with `refusal`: it waits first.
    fn refused_at_the_source(refusal: Redirect) -> Delivery {
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(Some(refusal)), Step::Wait(FIRST_WAIT));
        route
    }

    /// Answers `redirect` to every step until one is not a wait; the waits made.
    fn waits_through(route: &mut Delivery, redirect: Option<Redirect>) -> (Vec<Duration>, Step) {
        let mut waits = Vec::new();
        let mut step = route.failed(redirect.clone());
        while let Step::Wait(wait) = step {
            waits.push(wait);
            step = route.waited();
            if step == send(route.node(), route.asking) {
                step = route.failed(redirect.clone());
            }
        }
        (waits, step)
    }

    #[test]
    fn a_command_goes_first_to_the_slot_s_owner() {
        let (route, step) = Delivery::start(SOURCE.into());
        assert_eq!(step, send(SOURCE, false));
        assert_eq!(route.node(), SOURCE);
    }

    #[test]
    fn moved_reads_the_map_from_the_node_it_names_and_goes_there() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(moved(TARGET)), read_from(Some(TARGET)));
        // The node a MOVED names is where it goes, whatever the map read says.
        assert_eq!(route.mapped(Some(SOURCE.into())), send(TARGET, false));
        // And again without ASKING, after an ASK.
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(ask(TARGET)), send(TARGET, true));
        assert_eq!(route.failed(moved(SOURCE)), read_from(Some(SOURCE)));
        assert_eq!(route.mapped(None), send(SOURCE, false));
    }

    #[test]
    fn ask_sends_it_once_after_asking() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(ask(TARGET)), send(TARGET, true));
    }

    #[test]
    fn tryagain_after_ask_waits_and_asks_the_importing_node_again() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        route.failed(ask(TARGET));
        assert_eq!(
            route.failed(Some(Redirect::TryAgain)),
            Step::Wait(FIRST_WAIT)
        );
        // Not without ASKING: the importing node would answer MOVED back to the source.
        assert_eq!(route.waited(), send(TARGET, true));
    }

    #[test]
    fn tryagain_repeated_waits_until_the_migration_ends() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        route.failed(ask(TARGET));
        // The slot stays half-moved for a second: 20 refusals, each answered by a wait
        // and the same ASKING send.
        let mut waits = Vec::new();
        for _ in 0..20 {
            match route.failed(Some(Redirect::TryAgain)) {
                Step::Wait(wait) => waits.push(wait),
                other => panic!("gave up after {waits:?}: {other:?}"),
            }
            assert_eq!(route.waited(), send(TARGET, true));
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(&ms[..8], [2, 4, 8, 16, 32, 64, 100, 100]);
        assert_eq!(waits.iter().sum::<Duration>(), Duration::from_millis(1526));
        // Then the migration ends (SETSLOT NODE on the target): it serves the command,
        // and a request that starts at the source afterwards meets MOVED once.
        let (mut later, _) = Delivery::start(SOURCE.into());
        assert_eq!(later.failed(moved(TARGET)), read_from(Some(TARGET)));
        assert_eq!(later.mapped(Some(TARGET.into())), send(TARGET, false));
    }

    #[test]
    fn tryagain_gives_up_after_three_seconds_of_waits() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        route.failed(ask(TARGET));
        let (waits, last) = waits_through(&mut route, Some(Redirect::TryAgain));
        assert_eq!(last, Step::GiveUp);
        let total: Duration = waits.iter().sum();
        assert!(
            total >= PATIENCE && total < PATIENCE + LONGEST_WAIT,
            "{total:?}"
        );
        assert_eq!(waits.len(), 35);
    }

    #[test]
    fn tryagain_at_the_source_waits_and_goes_there_again() {
        let mut route = refused_at_the_source(Redirect::TryAgain);
        assert_eq!(route.waited(), send(SOURCE, false));
        // Its keys all moved meanwhile: ASK, and the target takes it.
        assert_eq!(route.failed(ask(TARGET)), send(TARGET, true));
    }

    #[test]
    fn redirects_back_and_forth_wait_and_read_the_map_rather_than_fail() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        // Two nodes whose views disagree send it back and forth.
        for i in 0..HOPS {
            let (to, from) = if i % 2 == 0 {
                (TARGET, SOURCE)
            } else {
                (SOURCE, TARGET)
            };
            assert_eq!(route.failed(moved(to)), read_from(Some(to)));
            assert_eq!(route.mapped(Some(from.into())), send(to, false));
        }
        assert_eq!(route.failed(moved(TARGET)), Step::Wait(FIRST_WAIT));
        assert_eq!(route.waited(), read_from(None));
        assert_eq!(route.mapped(Some(TARGET.into())), send(TARGET, false));
        // The count starts again after a wait.
        assert_eq!(route.failed(ask(SOURCE)), send(SOURCE, true));
    }

    #[test]
    fn clusterdown_waits_reads_the_map_and_goes_to_the_slot_s_primary() {
        let mut route = refused_at_the_source(Redirect::ClusterDown);
        assert_eq!(route.waited(), read_from(None));
        // No primary for the slot yet: wait again.
        assert_eq!(route.mapped(None), Step::Wait(FIRST_WAIT * 2));
        assert_eq!(route.waited(), read_from(None));
        assert_eq!(route.mapped(Some(REPLICA.into())), send(REPLICA, false));
        // A cluster that stays down: it gives up once its patience is spent.
        let (mut route, _) = Delivery::start(SOURCE.into());
        let mut step = route.failed(Some(Redirect::ClusterDown));
        let mut waited = Duration::ZERO;
        while let Step::Wait(wait) = step {
            waited += wait;
            assert_eq!(route.waited(), read_from(None));
            step = route.mapped(None);
        }
        assert_eq!(step, Step::GiveUp);
        assert!(waited >= PATIENCE, "{waited:?}");
    }

    #[test]
    fn a_failed_primary_goes_to_its_successor_or_gives_up() {
        // Its replica has taken over: the map read names it.
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(None), read_from(None));
        assert_eq!(route.mapped(Some(REPLICA.into())), send(REPLICA, false));
        // Not yet: the map names the failed node, or cannot be read. No wait: the buyer
        // hears 503 with Retry-After.
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(None), read_from(None));
        assert_eq!(route.mapped(Some(SOURCE.into())), Step::GiveUp);
        let (mut route, _) = Delivery::start(SOURCE.into());
        assert_eq!(route.failed(None), read_from(None));
        assert_eq!(route.mapped(None), Step::GiveUp);
    }

    #[test]
    fn a_failed_importing_node_is_left_for_the_slot_s_primary() {
        let (mut route, _) = Delivery::start(SOURCE.into());
        route.failed(ask(TARGET));
        assert_eq!(route.failed(None), read_from(None));
        assert_eq!(route.mapped(Some(SOURCE.into())), send(SOURCE, false));
    }
}
