//! `GET /metrics`: every sale's figures in the Prometheus text format, for the admin.
//!
//! The counters are kept in Redis by the scripts a request already runs (admission counts
//! its decisions, a publication its verdicts and batch, a sync the orders it records), so
//! counting costs a purchase no round trip. Redis's own figures (units left, the queue)
//! are read at scrape time. A Redis that loses its data loses the counters with it;
//! Prometheus takes a counter going down for a reset.

use std::fmt::Write;

use crate::actions::metrics;
use crate::error::Failure;
use crate::http::Answer;
use crate::storage::connections::Connections;
use seckill_core::outcomes::PURCHASE_OUTCOMES;
use seckill_core::sale::Figures;
use seckill_core::verdict::Verdict;
use seckill_core::BucketId;

/// What Prometheus expects of a text exposition.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The batch-size histogram's bounds, as `lua/publish.lua` counts them.
const BATCH_BOUNDS: [&str; 5] = ["1", "4", "16", "64", "256"];

pub async fn report(connections: Connections) -> Result<Answer, Failure> {
    let vouchers = metrics::figures(&connections).await?;
    Ok(Answer::text(CONTENT_TYPE, render(&vouchers)))
}

/// One family: its help and type lines, then a sample per voucher and label set.
struct Family<'a> {
    text: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(text: &'a mut String, name: &'static str, kind: &str, help: &str) -> Family<'a> {
        writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}").unwrap();
        Family { text, name }
    }

    fn sample(
        &mut self,
        suffix: &str,
        voucher_id: BucketId,
        label: Option<(&str, &str)>,
        value: i64,
    ) {
        let name = self.name;
        let extra = label.map_or(String::new(), |(key, value)| format!(",{key}=\"{value}\""));
        writeln!(
            self.text,
            "{name}{suffix}{{voucher_id=\"{voucher_id}\"{extra}}} {value}"
        )
        .unwrap();
    }
}

/// A gauge: its name, its help, and how to read it off a voucher's figures.
type Gauge = (&'static str, &'static str, fn(&Figures) -> i64);

fn render(vouchers: &[(BucketId, Figures)]) -> String {
    let mut text = String::new();
    let gauges: [Gauge; 5] = [
        (
            "seckill_voucher_units_left",
            "Units Redis can still hand out.",
            |f| f.units_left,
        ),
        (
            "seckill_voucher_units_initial",
            "The voucher's stock when the sale began.",
            |f| f.units_initial,
        ),
        (
            "seckill_queue_depth",
            "Admitted purchases waiting for the group commit into MySQL.",
            |f| f.queued,
        ),
        (
            "seckill_voucher_stale",
            "1 when Redis was found behind MySQL (it lost recent writes): the sale answers 503 until POST /vouchers/{id}/sync.",
            |f| i64::from(f.stale),
        ),
        (
            "seckill_mysql_missing_orders",
            "Orders buyers were told of that MySQL lacks (a failover to a lagging replica lost them): the sale's next sweep commits them again from Redis.",
            |f| f.mysql_missing,
        ),
    ];
    for (name, help, value) in gauges {
        let mut family = Family::new(&mut text, name, "gauge", help);
        for (id, figures) in vouchers {
            family.sample("", *id, None, value(figures));
        }
    }

    let mut family = Family::new(
        &mut text,
        "seckill_voucher_orders_total",
        "counter",
        "Orders committed in MySQL, as Redis learnt of them (cancelled and expired ones too).",
    );
    for (id, figures) in vouchers {
        family.sample("", *id, None, figures.orders);
    }

    let mut family = Family::new(
        &mut text,
        "seckill_units_sold_total",
        "counter",
        "Units of the orders committed in MySQL, as their publications counted them (an order may hold several).",
    );
    for (id, figures) in vouchers {
        family.sample("", *id, None, figures.counter("units:sold"));
    }

    let mut family = Family::new(
        &mut text,
        "seckill_units_returned_total",
        "counter",
        "Units of cancelled and expired orders given back to the sale.",
    );
    for (id, figures) in vouchers {
        family.sample("", *id, None, figures.counter("units:returned"));
    }

    let mut family = Family::new(
        &mut text,
        "seckill_line_length",
        "gauge",
        "Buyers waiting in the sale's line for units given back.",
    );
    for (id, figures) in vouchers {
        family.sample("", *id, None, figures.in_line);
    }

    let counted: [(&str, &str, &str, &[&str]); 4] = [
        (
            "seckill_purchase_outcomes_total",
            "Purchase requests by what admission decided, or the request met after it.",
            "purchase:",
            &PURCHASE_OUTCOMES,
        ),
        (
            "seckill_commit_outcomes_total",
            "Queued purchases by what MySQL decided in the group commit.",
            "commit:",
            &Verdict::tags(),
        ),
        (
            "seckill_order_changes_total",
            "Orders paid, cancelled, or expired unpaid (their units given back); restored: committed again from Redis after MySQL lost them; unrecoverable: lost by MySQL with no unit left for them.",
            "orders:",
            &["paid", "cancelled", "expired", "restored", "unrecoverable"],
        ),
        (
            "seckill_line_total",
            "The sale's line: buyers who joined it and who left it, and units handed from it (each to a buyer in it, as an order).",
            "line:",
            &["joined", "left", "handed"],
        ),
    ];
    for (name, help, prefix, outcomes) in counted {
        let mut family = Family::new(&mut text, name, "counter", help);
        for (id, figures) in vouchers {
            for outcome in outcomes {
                let count = figures.counter(&format!("{prefix}{outcome}"));
                family.sample("", *id, Some(("outcome", outcome)), count);
            }
        }
    }

    let mut family = Family::new(
        &mut text,
        "seckill_commit_batch_size",
        "histogram",
        "Purchases per MySQL transaction of the group commit.",
    );
    for (id, figures) in vouchers {
        for bound in BATCH_BOUNDS {
            let count = figures.counter(&format!("batch:le:{bound}"));
            family.sample("_bucket", *id, Some(("le", bound)), count);
        }
        let count = figures.counter("batch:count");
        family.sample("_bucket", *id, Some(("le", "+Inf")), count);
        family.sample("_sum", *id, None, figures.counter("batch:sum"));
        family.sample("_count", *id, None, count);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_family_once_with_every_series_of_each_voucher() {
        let figures = Figures {
            units_left: 0,
            units_initial: 10,
            queued: 2,
            orders: 9,
            stale: false,
            mysql_missing: 0,
            in_line: 3,
            counters: vec![
                ("purchase:admitted".into(), 11),
                ("line:joined".into(), 5),
                ("commit:ordered".into(), 9),
                ("units:sold".into(), 14),
                ("batch:le:4".into(), 3),
                ("batch:le:16".into(), 4),
                ("batch:le:64".into(), 4),
                ("batch:le:256".into(), 4),
                ("batch:count".into(), 4),
                ("batch:sum".into(), 9),
            ],
        };
        let text = render(&[
            (BucketId::from_raw(7), figures.clone()),
            (BucketId::from_raw(9), figures),
        ]);
        for line in [
            "seckill_voucher_units_left{voucher_id=\"7\"} 0",
            "seckill_voucher_units_initial{voucher_id=\"9\"} 10",
            "seckill_queue_depth{voucher_id=\"7\"} 2",
            "seckill_voucher_stale{voucher_id=\"7\"} 0",
            "seckill_mysql_missing_orders{voucher_id=\"7\"} 0",
            "seckill_voucher_orders_total{voucher_id=\"7\"} 9",
            "seckill_units_sold_total{voucher_id=\"9\"} 14",
            "seckill_purchase_outcomes_total{voucher_id=\"7\",outcome=\"admitted\"} 11",
            "seckill_purchase_outcomes_total{voucher_id=\"7\",outcome=\"busy\"} 0",
            "seckill_commit_outcomes_total{voucher_id=\"9\",outcome=\"ordered\"} 9",
            "seckill_commit_batch_size_bucket{voucher_id=\"7\",le=\"1\"} 0",
            "seckill_commit_batch_size_bucket{voucher_id=\"7\",le=\"4\"} 3",
            "seckill_commit_batch_size_bucket{voucher_id=\"7\",le=\"+Inf\"} 4",
            "seckill_commit_batch_size_sum{voucher_id=\"7\"} 9",
            "seckill_commit_batch_size_count{voucher_id=\"7\"} 4",
            "seckill_line_length{voucher_id=\"7\"} 3",
            "seckill_line_total{voucher_id=\"9\",outcome=\"joined\"} 5",
            "seckill_line_total{voucher_id=\"9\",outcome=\"handed\"} 0",
        ] {
            assert_eq!(text.lines().filter(|l| *l == line).count(), 1, "{line}");
        }
        assert_eq!(text.matches("# TYPE ").count(), 14);
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(
            samples,
            2 * (9 + PURCHASE_OUTCOMES.len() + Verdict::tags().len() + 5 + 3 + 8)
        );
    }
}
