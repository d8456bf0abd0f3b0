//! A voucher Redis holds no sale for, looked up, as a state machine that does no I/O of
//! its own (as [`crate::purchase`] is): Redis says whether MySQL may be asked (one
//! request a second per id, and never for an id above the highest MySQL handed out),
//! MySQL says what it holds, and Redis keeps what MySQL said: that no such voucher
//! exists, or the terms of a sale that ended so long ago that Redis let its keys expire,
//! installed again. A purchase and `GET /vouchers/{id}` run it, each answering the
//! [`Found`] its own way.

use crate::buckets::Spread;
use crate::error::BackendError;
use crate::ids::{BucketId, SaleId, VoucherId};
use crate::ledger::Ledger;
use crate::redis::{Command, Reply};
use crate::sale::{parsed, AskMysql, Call, Installer, Load, MayAsk, Probed, Terms};
use crate::sql::Lookup;

/// What the lookup needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// The voucher's terms in MySQL, if it has one, and the highest voucher id it has
    /// handed out; resume with [`Input::Voucher`].
    ReadVoucher,
    /// Over.
    Found(Found),
}

/// The result of what the lookup asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Redis(Result<Vec<Reply>, BackendError>),
    Voucher(Result<Lookup, BackendError>),
}

/// What the lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No such voucher (Redis keeps MySQL's word for a while).
    Unknown,
    /// Another request asked MySQL about it a moment ago: ask again shortly.
    NotNow,
    /// MySQL's terms, and what installing them in Redis did: `Ok(true)`, the sale ended
    /// and is installed again, ended; `Ok(false)`, not installed (a sale Redis lost that
    /// has not ended waits for an admin's sync). `sale`: the sale the voucher is a later
    /// bucket of, which no public route takes for a voucher (docs/design.md, "Buckets").
    Sale {
        terms: Terms,
        restored: Result<bool, BackendError>,
        sale: Option<SaleId>,
    },
    /// Redis or MySQL failed the lookup.
    Failed(BackendError),
}

#[derive(Debug, Clone)]
enum State {
    Probing,
    Asking,
    /// Keeping MySQL's word in Redis, then found.
    Keeping(Found),
    Restoring(Held),
    Done,
}

/// A sale as MySQL holds it, with what installing it in Redis takes ([`Load`]): what a
/// lookup restores and a sync (`crate::sync`) installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub terms: Terms,
    /// The highest voucher id MySQL had handed out when the terms were read: any row's,
    /// a sale's or a later bucket's, so a [`VoucherId`].
    pub highest: VoucherId,
    pub ledger: Ledger,
    pub spread: Spread,
    pub created: i64,
    pub terms_version: u64,
}

impl Held {
    /// `voucher_id`'s sale as `lookup` read it, if MySQL holds its terms.
    pub fn read(voucher_id: BucketId, lookup: Lookup) -> Option<Held> {
        Some(Held {
            terms: lookup.terms?,
            highest: lookup.highest.unwrap_or(voucher_id.into()),
            ledger: lookup.ledger,
            spread: lookup.spread,
            created: lookup.created,
            terms_version: lookup.terms_version,
        })
    }

    /// Installs it as `voucher_id`'s sale, by `installer`.
    pub fn load<'a>(&'a self, voucher_id: BucketId, installer: Installer<'a>) -> Load<'a> {
        Load {
            voucher_id,
            installer,
            terms: &self.terms,
            highest: self.highest,
            created: self.created,
            ledger: self.ledger,
            spread: &self.spread,
            terms_version: self.terms_version,
        }
    }
}

/// One lookup of a voucher.
#[derive(Debug, Clone)]
pub struct VoucherLookup {
    voucher_id: BucketId,
    state: State,
    causes: Vec<String>,
}

impl VoucherLookup {
    /// A lookup of `voucher_id`, and what it needs first: Redis's leave to ask MySQL.
    pub fn start(voucher_id: BucketId) -> (VoucherLookup, Io) {
        let lookup = VoucherLookup {
            voucher_id,
            state: State::Probing,
            causes: Vec::new(),
        };
        let io = Io::Redis(lookup.ask().command());
        (lookup, io)
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next.
    pub fn resume(&mut self, input: Input) -> Io {
        match (std::mem::replace(&mut self.state, State::Done), input) {
            (State::Probing, Input::Redis(reply)) => match parsed::<AskMysql>(reply) {
                Ok(MayAsk::Yes) => {
                    self.state = State::Asking;
                    Io::ReadVoucher
                }
                Ok(MayAsk::NotNow) => Io::Found(Found::NotNow),
                // A slot of a Redis Cluster that knew nothing: it learns the highest id.
                Ok(MayAsk::Unknown(highest)) => self.keep(false, highest),
                Err(error) => Io::Found(Found::Failed(error)),
            },
            (State::Asking, Input::Voucher(lookup)) => match lookup {
                // Not listed yet: unknown, as a made-up id is, MySQL's word kept alike (a
                // sync, which a sale Redis lost waits for, takes it back).
                Ok(lookup) if lookup.unlisted => self.keep(true, lookup.highest),
                Ok(lookup) => {
                    let highest = lookup.highest;
                    let Some(held) = Held::read(self.voucher_id, lookup) else {
                        return self.keep(true, highest);
                    };
                    let io =
                        Io::Redis(held.load(self.voucher_id, Installer::Restoration).command());
                    self.state = State::Restoring(held);
                    io
                }
                Err(error) => Io::Found(Found::Failed(error)),
            },
            (State::Keeping(found), Input::Redis(reply)) => {
                if let Err(cause) = reply {
                    self.causes
                        .push(format!("MySQL's answer not kept in Redis: {cause}"));
                }
                Io::Found(found)
            }
            (State::Restoring(Held { terms, spread, .. }), Input::Redis(reply)) => {
                let restored = parsed::<Load>(reply);
                let sale = match spread {
                    Spread::BucketOf(sale) => Some(sale),
                    Spread::Whole | Spread::First(_) => None,
                };
                Io::Found(Found::Sale {
                    terms,
                    restored,
                    sale,
                })
            }
            (state, input) => panic!("a lookup {state:?} given {input:?}"),
        }
    }

    /// What went wrong on the way that did not decide the lookup (for the log).
    pub fn causes(&self) -> &[String] {
        &self.causes
    }

    /// Whether MySQL may be asked: one request a second for purchases and the voucher's
    /// page together, per lookup slot.
    fn ask(&self) -> AskMysql {
        AskMysql {
            voucher_id: self.voucher_id,
            probe: true,
        }
    }

    /// Keeps in Redis that no such voucher exists (`absent`, MySQL's word) and the highest
    /// id MySQL handed out, then finds it unknown.
    fn keep(&mut self, absent: bool, highest: Option<VoucherId>) -> Io {
        self.state = State::Keeping(Found::Unknown);
        let probed = Probed {
            voucher_id: self.voucher_id,
            absent,
            highest,
        };
        Io::Redis(probed.command())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOUCHER: BucketId = BucketId::from_raw(7);

    fn terms() -> Terms {
        Terms::sample(0, 5, 1, 2)
    }

    fn texts(values: &[&str]) -> Input {
        Input::Redis(Ok(values.iter().map(|value| Reply::text(value)).collect()))
    }

    fn ints(values: &[i64]) -> Input {
        Input::Redis(Ok(values.iter().map(|value| Reply::Int(*value)).collect()))
    }

    fn script_of(io: &Io) -> &'static str {
        match io {
            Io::Redis(Command::Script { script, .. }) => script.name,
            other => panic!("not a script: {other:?}"),
        }
    }

    fn asked() -> VoucherLookup {
        let (mut lookup, io) = VoucherLookup::start(VOUCHER);
        assert_eq!(
            io,
            Io::Redis(
                AskMysql {
                    voucher_id: VOUCHER,
                    probe: true
                }
                .command()
            )
        );
        assert_eq!(lookup.resume(texts(&["ask"])), Io::ReadVoucher);
        lookup
    }

    #[test]
    fn an_id_mysql_does_not_hold_is_kept_unknown_in_redis() {
        let mut lookup = asked();
        let io = lookup.resume(Input::Voucher(Ok(Lookup {
            terms: None,
            highest: Some(VoucherId::from_raw(5)),
            ledger: Ledger::default(),
            spread: Spread::default(),
            created: 0,
            unlisted: false,
            terms_version: 0,
        })));
        assert_eq!(
            io,
            Io::Redis(
                Probed {
                    voucher_id: VOUCHER,
                    absent: true,
                    highest: Some(VoucherId::from_raw(5)),
                }
                .command()
            )
        );
        // A failure to keep it costs the next request the lookup again, no more.
        let io = lookup.resume(Input::Redis(Err(BackendError::Redis("gone".into()))));
        assert_eq!(io, Io::Found(Found::Unknown));
        assert_eq!(
            lookup.causes(),
            ["MySQL's answer not kept in Redis: redis: gone"]
        );
    }

    #[test]
    fn a_sale_not_listed_yet_is_unknown_as_a_made_up_id_is() {
        let mut lookup = asked();
        let io = lookup.resume(Input::Voucher(Ok(Lookup {
            terms: Some(terms()),
            highest: Some(VoucherId::from_raw(9)),
            ledger: Ledger::default(),
            spread: Spread::default(),
            created: 1,
            unlisted: true,
            terms_version: 0,
        })));
        let probed = Probed {
            voucher_id: VOUCHER,
            absent: true,
            highest: Some(VoucherId::from_raw(9)),
        };
        assert_eq!(io, Io::Redis(probed.command()));
        assert_eq!(lookup.resume(ints(&[1])), Io::Found(Found::Unknown));
    }

    #[test]
    fn an_ended_sale_mysql_holds_is_installed_again() {
        let mut lookup = asked();
        let io = lookup.resume(Input::Voucher(Ok(Lookup {
            terms: Some(terms()),
            highest: None,
            ledger: Ledger::default(),
            spread: Spread::default(),
            created: 0,
            unlisted: false,
            terms_version: 0,
        })));
        assert_eq!(script_of(&io), "load");
        assert_eq!(
            lookup.resume(ints(&[1])),
            Io::Found(Found::Sale {
                terms: terms(),
                restored: Ok(true),
                sale: None,
            })
        );
    }

    #[test]
    fn redis_busy_with_another_lookup_or_a_failure_ends_it() {
        let (mut lookup, _) = VoucherLookup::start(VOUCHER);
        assert_eq!(lookup.resume(texts(&["wait"])), Io::Found(Found::NotNow));
        let (mut lookup, _) = VoucherLookup::start(VOUCHER);
        let failure = BackendError::Redis("gone".into());
        assert_eq!(
            lookup.resume(Input::Redis(Err(failure.clone()))),
            Io::Found(Found::Failed(failure))
        );
        let mut lookup = asked();
        let failure = BackendError::Mysql("gone".into());
        assert_eq!(
            lookup.resume(Input::Voucher(Err(failure.clone()))),
            Io::Found(Found::Failed(failure))
        );
    }
}
