//! Voucher routes: create, list, sync, end and expire (admin), and read (public).

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use super::events;
use crate::actions::vouchers::{self, now_ms};
use crate::error::Failure;
use crate::http::{json_body, page_params, Answer, Request, Then};
use crate::storage::connections::Connections;
use crate::storage::db::NewVoucherRow;
use seckill_core::buckets::MAX_BUCKETS;
use seckill_core::sale::{Terms, MOST_PER_BUYER};
use seckill_core::sql::Listed;
use seckill_core::{ApiError, SaleId, Unavailable};

pub const MAX_TITLE_CHARS: usize = 128;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const MAX_STOCK: i64 = 10_000_000;
/// How long a winner has to pay, by default and at most (a week, as long as Redis keeps
/// a sale after its end).
pub const PAY_WITHIN_S: i64 = 900;
pub const MAX_PAY_WITHIN_S: i64 = 604_800;
/// The longest opening draw: a minute.
pub const MAX_DRAW_MS: i64 = 60_000;
/// The most units a sale with a draw may have: its units go out in the first seconds after
/// the draw, and a Redis Cluster slot hands out 262,144 order ids a second.
pub const MAX_DRAWN_STOCK: i64 = 100_000;
/// How long a CDN or browser may reuse a voucher read: product pages poll it every second.
const VIEW_CACHE_CONTROL: &str = "public, max-age=1";
/// How long a cache may keep a voucher's `404`: a voucher created since is seen this late.
const NOT_FOUND_CACHE_CONTROL: &str = "public, max-age=5";

/// The body of `POST /vouchers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVoucher {
    title: String,
    #[serde(default)]
    description: Option<String>,
    stock: i64,
    begin_time: String,
    end_time: String,
    #[serde(default)]
    pay_within_s: Option<i64>,
    /// Buckets to spread the stock over, on as many Redis Cluster slots (docs/design.md,
    /// "Buckets"): 1, the default, for all but the hottest sales.
    #[serde(default)]
    buckets: Option<i64>,
    /// An opening draw of this many milliseconds (docs/design.md, "The opening draw"): 0,
    /// the default, for first come, first served.
    #[serde(default)]
    draw_ms: Option<i64>,
    /// The most units one buyer may hold (docs/design.md, "Quantities"): 1, the default.
    #[serde(default)]
    per_buyer: Option<i64>,
    /// When the sale is listed (docs/design.md, "Unlisted until announced"): at its
    /// creation, the default.
    #[serde(default)]
    announce_at: Option<String>,
}

/// A voucher as the API shows it.
#[derive(Debug, Serialize, PartialEq)]
pub struct VoucherView {
    id: SaleId,
    title: String,
    description: String,
    /// The initial stock.
    stock: u64,
    remaining: u64,
    begin_time: String,
    end_time: String,
    status: &'static str,
    /// How long a winner has to pay before her order expires.
    pay_within_s: u64,
    /// The clock `status` was decided by, to the millisecond: Redis's, which admission
    /// decides by, when the answer comes from Redis. A sale page counts down by it.
    server_time: String,
    /// When the opening draw's window closes and its units go out, to the millisecond;
    /// `null` for a sale first come, first served.
    draw_at: Option<String>,
    /// The most units one buyer may hold.
    per_buyer: u64,
    /// When the sale is listed, to the second; `null` for a sale listed from its creation.
    announce_at: Option<String>,
}

impl NewVoucher {
    /// Checks every field; times are kept to the second, as MySQL stores them.
    pub fn validate(&self) -> Result<NewVoucherRow, ApiError> {
        let bad =
            |field: &'static str, message: String| Err(ApiError::InvalidField { field, message });
        let description = self.description.as_deref().unwrap_or("");
        check_words(&self.title, description)?;
        if !(1..=MAX_STOCK).contains(&self.stock) {
            return bad("stock", format!("stock must be between 1 and {MAX_STOCK}"));
        }
        let begin = parse_time("begin_time", &self.begin_time)?;
        let end = parse_time("end_time", &self.end_time)?;
        if end <= begin {
            return bad("end_time", "end_time must be after begin_time".into());
        }
        let pay_within_s = self.pay_within_s.unwrap_or(PAY_WITHIN_S);
        if !(1..=MAX_PAY_WITHIN_S).contains(&pay_within_s) {
            return bad(
                "pay_within_s",
                format!("pay_within_s must be between 1 and {MAX_PAY_WITHIN_S}"),
            );
        }
        let buckets = self.buckets.unwrap_or(1);
        if !(1..=MAX_BUCKETS as i64).contains(&buckets) || buckets > self.stock {
            return bad(
                "buckets",
                format!("buckets must be between 1 and {MAX_BUCKETS}, and at most the stock"),
            );
        }
        let draw_ms = self.draw_ms.unwrap_or(0);
        if !(0..=MAX_DRAW_MS).contains(&draw_ms) {
            return bad(
                "draw_ms",
                format!("draw_ms must be between 0 and {MAX_DRAW_MS}"),
            );
        }
        if draw_ms > 0 && buckets > 1 {
            return bad(
                "draw_ms",
                "a sale with a draw_ms is one bucket: its draw ranks every entrant".into(),
            );
        }
        if draw_ms > 0 && self.stock > MAX_DRAWN_STOCK {
            return bad(
                "stock",
                format!("a sale with a draw_ms has at most {MAX_DRAWN_STOCK} units"),
            );
        }
        let per_buyer = self.per_buyer.unwrap_or(1);
        if !(1..=i64::from(MOST_PER_BUYER)).contains(&per_buyer) {
            return bad(
                "per_buyer",
                format!("per_buyer must be between 1 and {MOST_PER_BUYER}"),
            );
        }
        let announce = match &self.announce_at {
            Some(text) => Some(parse_time("announce_at", text)?),
            None => None,
        };
        // A sale opens listed: none of its buyers presses a sale nobody can see.
        if announce.is_some_and(|announce| announce > begin) {
            return bad(
                "announce_at",
                "announce_at must be at or before begin_time".into(),
            );
        }
        Ok(NewVoucherRow {
            title: self.title.clone(),
            description: description.to_string(),
            stock: self.stock as u64,
            begin,
            end,
            pay_within_s: pay_within_s as u64,
            buckets: buckets as u64,
            draw_ms: draw_ms as u64,
            per_buyer: per_buyer as u64,
            announce,
        })
    }
}

/// The body of `PATCH /vouchers/{id}`: any of a creation's fields, each the sale's new
/// value (`stock`: the units the sale has ever offered, so that asking the same change
/// twice adds its units once).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaleEdit {
    title: Option<String>,
    description: Option<String>,
    stock: Option<i64>,
    begin_time: Option<String>,
    end_time: Option<String>,
    pay_within_s: Option<i64>,
    buckets: Option<i64>,
    draw_ms: Option<i64>,
    per_buyer: Option<i64>,
    announce_at: Option<String>,
}

/// A change only a sale that has not opened may take, and the fields that make one.
const RESHAPING: [&str; 6] = [
    "begin_time",
    "pay_within_s",
    "draw_ms",
    "per_buyer",
    "announce_at",
    "stock",
];

impl SaleEdit {
    /// What the change makes of the sale `current` at `now_ms` (docs/design.md, "Changing
    /// a sale"): `None` when nothing changes; else its new terms, checked as a creation's,
    /// and whether they need the sale unopened. Refused (`cannot_change`): its buckets,
    /// which a creation placed; once it has ended, all but its title and description;
    /// once it opens (within [`vouchers::CHANGE_GUARD_S`] of its begin), all but those, a
    /// later end and more stock.
    pub fn decide(
        &self,
        current: &Listed,
        now_ms: i64,
    ) -> Result<Option<(NewVoucherRow, bool)>, ApiError> {
        let old = current_row(current)?;
        if now_ms >= current.terms.end_ms {
            return self.words_of_ended(old);
        }
        let or = |edit: &Option<i64>, now: u64| Some(edit.unwrap_or(now as i64));
        let new = NewVoucher {
            title: self.title.clone().unwrap_or_else(|| old.title.clone()),
            description: Some(
                self.description
                    .clone()
                    .unwrap_or_else(|| old.description.clone()),
            ),
            stock: self.stock.unwrap_or(old.stock as i64),
            begin_time: self
                .begin_time
                .clone()
                .unwrap_or_else(|| rfc3339(old.begin)),
            end_time: self.end_time.clone().unwrap_or_else(|| rfc3339(old.end)),
            pay_within_s: or(&self.pay_within_s, old.pay_within_s),
            buckets: or(&self.buckets, old.buckets),
            draw_ms: or(&self.draw_ms, old.draw_ms),
            per_buyer: or(&self.per_buyer, old.per_buyer),
            announce_at: self.announce_at.clone().or(old.announce.map(rfc3339)),
        }
        .validate()?;
        if new == old {
            return Ok(None);
        }
        let differs = |field: &str| match field {
            "begin_time" => new.begin != old.begin,
            "end_time" => new.end != old.end,
            "pay_within_s" => new.pay_within_s != old.pay_within_s,
            "draw_ms" => new.draw_ms != old.draw_ms,
            "per_buyer" => new.per_buyer != old.per_buyer,
            "announce_at" => new.announce != old.announce,
            "stock" => new.stock != old.stock,
            _ => false,
        };
        let refuse = |field: &'static str, message: &str| {
            Err(ApiError::CannotChange {
                field,
                message: message.to_string(),
            })
        };
        if new.buckets != old.buckets {
            return refuse(
                "buckets",
                "a sale's buckets are placed when it is created; create a new sale instead",
            );
        }
        let terms = &current.terms;
        let reshaped = RESHAPING.into_iter().find(|field| differs(field));
        let open = now_ms >= terms.begin_ms - vouchers::CHANGE_GUARD_S as i64 * 1000;
        if !open {
            return Ok(Some((new, reshaped.is_some())));
        }
        if new.stock < old.stock {
            return refuse(
                "stock",
                "once a sale opens its stock only grows (a restock)",
            );
        }
        if let Some(field) = reshaped.filter(|field| *field != "stock") {
            return refuse(
                field,
                "the sale has opened (or opens within seconds): only its title, description, a later end_time and more stock may change",
            );
        }
        if new.end < old.end {
            return refuse(
                "end_time",
                "once a sale opens its end only moves later; POST /vouchers/{id}/end ends it now",
            );
        }
        Ok(Some((new, false)))
    }
}

impl SaleEdit {
    /// The change of an ended sale: its title and description, checked alone (a sale ended
    /// before it opened has its begin at its end, which no creation takes); any other
    /// field given must read as it stands.
    fn words_of_ended(
        &self,
        old: NewVoucherRow,
    ) -> Result<Option<(NewVoucherRow, bool)>, ApiError> {
        let time = |field, text: &Option<String>, now| {
            text.as_deref()
                .map(|text| parse_time(field, text).map(|at| at != now))
                .transpose()
        };
        let count = |edit: Option<i64>, now: u64| edit.map(|edit| edit != now as i64);
        let announce = match &self.announce_at {
            None => None,
            Some(text) => Some(Some(parse_time("announce_at", text)?) != old.announce),
        };
        let others = [
            ("stock", count(self.stock, old.stock)),
            (
                "begin_time",
                time("begin_time", &self.begin_time, old.begin)?,
            ),
            ("end_time", time("end_time", &self.end_time, old.end)?),
            ("pay_within_s", count(self.pay_within_s, old.pay_within_s)),
            ("buckets", count(self.buckets, old.buckets)),
            ("draw_ms", count(self.draw_ms, old.draw_ms)),
            ("per_buyer", count(self.per_buyer, old.per_buyer)),
            ("announce_at", announce),
        ];
        if let Some((field, _)) = others
            .into_iter()
            .find(|(_, differs)| *differs == Some(true))
        {
            return Err(ApiError::CannotChange {
                field,
                message: "the sale has ended: only its title and description may change".into(),
            });
        }
        let new = NewVoucherRow {
            title: self.title.clone().unwrap_or_else(|| old.title.clone()),
            description: self
                .description
                .clone()
                .unwrap_or_else(|| old.description.clone()),
            ..old.clone()
        };
        check_words(&new.title, &new.description)?;
        Ok((new != old).then_some((new, false)))
    }
}

/// The sale's terms as a change compares them with its new ones.
fn current_row(current: &Listed) -> Result<NewVoucherRow, ApiError> {
    let terms = &current.terms;
    let at = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .ok_or(ApiError::Unavailable(Unavailable::TimesOutOfRange))
    };
    Ok(NewVoucherRow {
        title: terms.title.clone(),
        description: terms.description.clone(),
        stock: terms.initial_stock,
        begin: at(terms.begin_ms)?,
        end: at(terms.end_ms)?,
        pay_within_s: terms.pay_within_s,
        buckets: current.buckets,
        draw_ms: terms.draw_ms,
        per_buyer: terms.per_buyer,
        announce: match terms.announce_ms {
            0 => None,
            ms => Some(at(ms)?),
        },
    })
}

/// A sale's title and description, as people read them.
fn check_words(title: &str, description: &str) -> Result<(), ApiError> {
    if title.trim().is_empty() || title.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::InvalidField {
            field: "title",
            message: format!("title must have 1 to {MAX_TITLE_CHARS} characters"),
        });
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::InvalidField {
            field: "description",
            message: format!("description must have at most {MAX_DESCRIPTION_CHARS} characters"),
        });
    }
    Ok(())
}

fn parse_time(field: &'static str, text: &str) -> Result<DateTime<Utc>, ApiError> {
    let invalid = || ApiError::InvalidField {
        field,
        message: format!(
            "{field} must be an RFC 3339 time between 1970 and 9999, like 2030-01-01T12:00:00+08:00"
        ),
    };
    let at = DateTime::parse_from_rfc3339(text)
        .map_err(|_| invalid())?
        .with_timezone(&Utc);
    let whole_seconds = DateTime::from_timestamp(at.timestamp(), 0).ok_or_else(invalid)?;
    if whole_seconds.timestamp() < 0 || whole_seconds.year() > 9999 {
        return Err(invalid());
    }
    Ok(whole_seconds)
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl VoucherView {
    /// The voucher with the status its terms have at `now_ms`: Redis's clock (the sale's,
    /// which admission decides by) when the terms come from Redis.
    pub fn new(id: SaleId, terms: &Terms, now_ms: i64) -> Option<VoucherView> {
        let at = |ms: i64| DateTime::from_timestamp_millis(ms);
        Some(VoucherView {
            id,
            title: terms.title.clone(),
            description: terms.description.clone(),
            stock: terms.initial_stock,
            remaining: terms.stock,
            begin_time: rfc3339(at(terms.begin_ms)?),
            end_time: rfc3339(at(terms.end_ms)?),
            status: terms.status(now_ms),
            pay_within_s: terms.pay_within_s,
            server_time: at(now_ms)?.to_rfc3339_opts(SecondsFormat::Millis, true),
            draw_at: match terms.draw_ms {
                0 => None,
                ms => Some(
                    at(terms.begin_ms + ms as i64)?.to_rfc3339_opts(SecondsFormat::Millis, true),
                ),
            },
            per_buyer: terms.per_buyer,
            announce_at: match terms.announce_ms {
                0 => None,
                ms => Some(rfc3339(at(ms)?)),
            },
        })
    }
}

/// A sale as the merchant's console lists it: as a buyer sees it, with its orders (MySQL's
/// count, whatever became of them), its buckets and its draw's window.
#[derive(Debug, Serialize)]
pub struct SaleView {
    #[serde(flatten)]
    voucher: VoucherView,
    orders: u64,
    buckets: u64,
    draw_ms: u64,
}

impl SaleView {
    fn new(listed: &Listed, now_ms: i64) -> Result<SaleView, ApiError> {
        Ok(SaleView {
            voucher: view(listed.id, &listed.terms, now_ms)?,
            orders: listed.orders,
            buckets: listed.buckets,
            draw_ms: listed.terms.draw_ms,
        })
    }
}

/// The voucher as shown, or a `503` for terms no time can show (only a Redis written by
/// something else holds them).
fn view(id: SaleId, terms: &Terms, now_ms: i64) -> Result<VoucherView, ApiError> {
    VoucherView::new(id, terms, now_ms).ok_or(ApiError::Unavailable(Unavailable::TimesOutOfRange))
}

/// `POST /vouchers`: the sale written to MySQL and preloaded into Redis, or undone
/// (`actions::vouchers::create`).
pub async fn create(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let body: NewVoucher = json_body(request)?;
    let new = body.validate()?;
    let (id, terms) = vouchers::create(&new, &connections).await?;
    Answer::json(201, view(id, &terms, now_ms())?)
}

/// `GET /vouchers/{id}`: product pages poll this, so it answers from Redis in one round
/// trip (`actions::vouchers::read`), and a `404` may be cached. A query string is
/// refused before anything is read: a cache in front keys pages by their whole address,
/// and `?<anything>` would pass it.
pub async fn get(
    id: SaleId,
    request: &Request,
    connections: Connections,
) -> Result<Answer, Failure> {
    if !request.query.is_empty() {
        return Err(ApiError::BadRequest("a voucher's page takes no query string".into()).into());
    }
    let Some(read) = vouchers::read(id, connections).await? else {
        return not_found();
    };
    let mut answer = cacheable(view(id, &read.terms, read.now_ms)?)?;
    answer.then = read.sweeps.map(|sweeps| Then::new(sweeps.run()));
    Ok(answer)
}

/// A `404` a CDN may keep for a few seconds, so that a flood of made-up ids stops there.
fn not_found() -> Result<Answer, Failure> {
    let mut reply = Answer::json(404, ApiError::NotFound.body())?;
    reply
        .headers
        .push(("cache-control", NOT_FOUND_CACHE_CONTROL.to_string()));
    Ok(reply)
}

fn cacheable(view: VoucherView) -> Result<Answer, Failure> {
    let mut reply = Answer::json(200, view)?;
    reply
        .headers
        .push(("cache-control", VIEW_CACHE_CONTROL.to_string()));
    Ok(reply)
}

/// `POST /vouchers/{id}/sync`: rebuilds the voucher's Redis state from MySQL after Redis
/// lost data (`actions::vouchers::sync`).
pub async fn sync(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let terms = vouchers::sync(id, &connections).await?;
    Answer::json(200, view(id, &terms, now_ms())?)
}

/// `POST /vouchers/{id}/end`: the sale ends now, in MySQL and in Redis
/// (`actions::vouchers::end`).
pub async fn end(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let (terms, now) = vouchers::end(id, &connections).await?;
    Answer::json(200, view(id, &terms, now)?)
}

/// `POST /vouchers/{id}/expire`: expires the voucher's unpaid orders past their deadline
/// now and gives their units back (`actions::vouchers::expire`).
pub async fn expire(id: SaleId, connections: Connections) -> Result<Answer, Failure> {
    let given = vouchers::expire(id, &connections).await?;
    Answer::json(200, serde_json::json!({ "units_returned": given }))
}

/// `GET /vouchers?after=&limit=`: the merchant's sales, newest first, each as MySQL
/// holds it (`remaining` is MySQL's stock, its status by this host's clock), with its
/// orders and buckets; `next` is the `after` of the next page, `null` after the last.
pub async fn list(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let (after, limit) = page_params(request, events::DEFAULT_LIMIT, events::MAX_LIMIT)?;
    let page = vouchers::list(after.unwrap_or(u64::MAX), limit, &connections).await?;
    let now = now_ms();
    let views = page
        .iter()
        .map(|listed| SaleView::new(listed, now))
        .collect::<Result<Vec<_>, _>>()?;
    let next = match page.last() {
        Some(listed) if page.len() == limit as usize => Some(listed.id.to_string()),
        _ => None,
    };
    Answer::json(200, serde_json::json!({ "vouchers": views, "next": next }))
}

/// `PATCH /vouchers/{id}`: changes the sale as far as its state allows
/// ([`SaleEdit::decide`]; `actions::vouchers::change`); the sale as listed after it.
pub async fn change(
    id: SaleId,
    request: &Request,
    connections: Connections,
) -> Result<Answer, Failure> {
    let edit: SaleEdit = json_body(request)?;
    let changed =
        vouchers::change(id, |current, now| edit.decide(current, now), &connections).await?;
    Answer::json(200, SaleView::new(&changed, now_ms())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voucher(json: &str) -> Result<NewVoucher, serde_json::Error> {
        serde_json::from_str(json)
    }

    fn valid() -> NewVoucher {
        voucher(
            r#"{"title":"100 元代金券","stock":50,"begin_time":"2030-01-01T08:00:00+08:00",
                "end_time":"2030-01-01T01:00:00.999Z","description":"flash"}"#,
        )
        .unwrap()
    }

    #[test]
    fn accepts_a_valid_voucher_and_normalises_times_to_utc_seconds() {
        let body = valid();
        let row = body.validate().unwrap();
        assert_eq!(row.title, "100 元代金券");
        assert_eq!(row.stock, 50);
        assert_eq!(rfc3339(row.begin), "2030-01-01T00:00:00Z");
        assert_eq!(rfc3339(row.end), "2030-01-01T01:00:00Z");
        assert_eq!(row.description, "flash");
    }

    #[test]
    fn rejects_each_bad_field() {
        let edits: [(&str, serde_json::Value); 15] = [
            ("title", "".into()),
            ("title", "   ".into()),
            ("title", "x".repeat(129).into()),
            ("description", "d".repeat(1025).into()),
            ("stock", 0.into()),
            ("stock", (-1).into()),
            ("stock", 10_000_001.into()),
            ("begin_time", "2030-01-01 00:00:00".into()),
            ("end_time", "2030-01-01T00:00:00Z".into()),
            ("begin_time", "1969-12-31T23:59:59Z".into()),
            ("per_buyer", 0.into()),
            ("per_buyer", 11.into()),
            ("per_buyer", (-2).into()),
            ("announce_at", "2030-01-01T00:00:01Z".into()),
            ("announce_at", "tomorrow".into()),
        ];
        for (field, value) in edits {
            let mut json = serde_json::json!({"title":"t","stock":5,
                "begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"});
            json[field] = value.clone();
            let body: NewVoucher = serde_json::from_value(json).unwrap();
            let error = body.validate().unwrap_err();
            assert_eq!(error.code(), "bad_request", "{field} = {value}");
        }
    }

    #[test]
    fn titles_count_characters_not_bytes() {
        let mut body = valid();
        body.title = "券".repeat(128);
        assert!(body.validate().is_ok());
        body.title.push('券');
        assert!(body.validate().is_err());
    }

    #[test]
    fn wrong_types_and_unknown_fields_do_not_parse() {
        for json in [
            r#"{"title":"t","stock":"5","begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":5.5,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":99999999999999999999,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z"}"#,
            r#"{"title":"t","stock":5,"begin_time":"2030-01-01T00:00:00Z","end_time":"2030-01-02T00:00:00Z","user_id":"1"}"#,
            r#"{"title":"t","stock":5,"begin_time":"2030-01-01T00:00:00Z"}"#,
        ] {
            assert!(voucher(json).is_err(), "{json}");
        }
    }

    #[test]
    fn a_view_shows_all_the_units_and_those_left() {
        let terms = Terms {
            stock: 0,
            ..Terms::sample(5, 5, 1_000_000, 2_000_000)
        };
        let view = VoucherView::new(SaleId::from_raw(1), &terms, 1_500_000).unwrap();
        assert_eq!(
            (view.stock, view.remaining, view.status),
            (5, 0, "sold_out")
        );
        assert_eq!(view.begin_time, "1970-01-01T00:16:40Z");
    }
}
