//! Setting a sale up the way a storefront would: through the component's own API, with
//! the admin token and buyers' signed tokens; and removing what the benchmark left.

use std::io::Write;
use std::ops::Range;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use chrono::{DateTime, Duration, Utc};
use mysql_async::prelude::Queryable;
use reqwest::StatusCode;
use serde_json::{json, Value};

use seckill_core::sale::{Call, Forget, Unlist};
use seckill_core::BucketId;
use seckill_tests::drivers::app::{buyer_token, ADMIN_TOKEN};
use seckill_tests::drivers::scripts;
use seckill_tests::servers::local;

/// Every voucher the benchmark creates has this title, so a later run can find and
/// remove them all, even after an interrupted run.
pub const TITLE: &str = "seckill-bench";

#[derive(Clone)]
pub struct Storefront {
    pub client: reqwest::Client,
    pub base: String,
}

impl Storefront {
    pub fn new(base: &str) -> Result<Storefront> {
        Ok(Storefront {
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
            base: base.to_string(),
        })
    }

    /// A voucher on sale from a minute ago for an hour; returns its id.
    pub async fn create_voucher(&self, stock: u64) -> Result<u64> {
        self.create_sale(stock, Utc::now() - Duration::seconds(60), None, 1)
            .await
    }

    /// A voucher on sale from `opening` (whole seconds: the API keeps no fraction) for an
    /// hour, its orders to be paid within `pay_within_s` (the API's default for `None`),
    /// a buyer holding up to `per_buyer` units; returns its id.
    pub async fn create_sale(
        &self,
        stock: u64,
        opening: DateTime<Utc>,
        pay_within_s: Option<u64>,
        per_buyer: u64,
    ) -> Result<u64> {
        let mut body = json!({
            "title": TITLE,
            "stock": stock,
            "begin_time": opening.to_rfc3339(),
            "end_time": (opening + Duration::seconds(3600)).to_rfc3339(),
        });
        // Only when more than one: a baseline build from before quantities refuses it.
        if per_buyer > 1 {
            body["per_buyer"] = json!(per_buyer);
        }
        if let Some(seconds) = pay_within_s {
            body["pay_within_s"] = json!(seconds);
        }
        let response = self
            .client
            .post(format!("{}/vouchers", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await?;
        ensure!(
            response.status() == StatusCode::CREATED,
            "creating a voucher: {}",
            response.status()
        );
        let view: Value = response.json().await?;
        view["id"].as_u64().context("voucher id")
    }

    /// One purchase attempt by `user`; returns the status and the JSON body.
    pub async fn buy(&self, voucher_id: u64, user: u64) -> Result<(StatusCode, Value)> {
        let response = self
            .client
            .post(format!("{}/vouchers/{voucher_id}/orders", self.base))
            .bearer_auth(buyer_token(user))
            .send()
            .await?;
        answer(response).await
    }

    /// Pays an order, as the payment system would (with the admin token); returns the
    /// status and the JSON body.
    pub async fn pay(&self, order_id: u64) -> Result<(StatusCode, Value)> {
        self.admin_post(&format!("/orders/{order_id}/pay")).await
    }

    /// Expires the voucher's unpaid orders past their deadline now, as a scheduler would;
    /// returns the units given back.
    pub async fn expire(&self, voucher_id: u64) -> Result<u64> {
        let (status, body) = self
            .admin_post(&format!("/vouchers/{voucher_id}/expire"))
            .await?;
        ensure!(status == StatusCode::OK, "expiring orders: {status} {body}");
        body["units_returned"].as_u64().context("units_returned")
    }

    /// A `POST` with no body under the admin token: the status and the JSON body.
    async fn admin_post(&self, path: &str) -> Result<(StatusCode, Value)> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await?;
        answer(response).await
    }
}

/// A response's status and JSON body (`null` when it has none).
async fn answer(response: reqwest::Response) -> Result<(StatusCode, Value)> {
    let status = response.status();
    let bytes = response.bytes().await?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Writes one buyer token a line, for the users in `users`.
pub fn write_tokens(path: &Path, users: Range<u64>) -> Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for user in users {
        writeln!(file, "{}", buyer_token(user))?;
    }
    file.flush()?;
    Ok(())
}

/// Removes every benchmark voucher, its orders and its Redis sale state.
pub async fn remove_bench_data() -> Result<()> {
    let pool = local::mysql();
    let mut mysql = pool.get_conn().await?;
    let ids: Vec<u64> = mysql
        .exec("SELECT id FROM tb_voucher WHERE title = ?", (TITLE,))
        .await?;
    for id in &ids {
        mysql
            .exec_drop("DELETE FROM tb_voucher_order WHERE voucher_id = ?", (id,))
            .await?;
        mysql
            .exec_drop("DELETE FROM tb_voucher WHERE id = ?", (id,))
            .await?;
        forget_in_redis(*id).await?;
    }
    drop(mysql);
    pool.disconnect().await?;
    Ok(())
}

/// Deletes a voucher's sale state from Redis, as a creation that failed does (the buyers'
/// outcome lists expire on their own, within a minute).
pub async fn forget_in_redis(voucher_id: u64) -> Result<()> {
    let voucher_id = BucketId::from_raw(voucher_id);
    let mut redis = local::redis().await;
    for command in [
        Forget { voucher_id }.command(),
        Unlist { voucher_id }.command(),
    ] {
        scripts::run(&mut redis, &command).await?;
    }
    Ok(())
}
