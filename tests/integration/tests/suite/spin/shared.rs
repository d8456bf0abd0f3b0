//! What more than one of these suites writes: an admin's creation of a voucher, and a
//! count of the vouchers MySQL holds.

use reqwest::Method;
use serde_json::json;

use seckill_tests::drivers::app::{Answer, App, ADMIN_TOKEN};
use seckill_tests::servers::local::mysql_first;

/// The admin's `POST /vouchers` of one unit titled `title`, on sale from `begin_time` to
/// `end_time` (RFC 3339).
pub async fn create_voucher(app: &App, title: &str, begin_time: &str, end_time: &str) -> Answer {
    let body = json!({
        "title": title,
        "stock": 1,
        "begin_time": begin_time,
        "end_time": end_time,
    });
    app.call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
        .await
}

/// How many vouchers the shared MySQL holds `WHERE condition`, its `?`s bound to `params`.
pub async fn vouchers_where(condition: &str, params: impl Into<mysql_async::Params> + Send) -> u64 {
    let sql = format!("SELECT COUNT(*) FROM tb_voucher WHERE {condition}");
    mysql_first(&sql, params).await.unwrap()
}
