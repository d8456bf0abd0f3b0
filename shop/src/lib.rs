//! The sale page, a Spin component of its own beside the API so that the purchase path
//! stays as small as it is: one voucher's title, a countdown by the server's clock, the
//! units left, a Buy button, and the sale's line for a buyer told sold out (her place
//! while she waits, then her order). Beside it, at `/shop/live`, the operator's live view
//! of a sale, drawn from the API's `GET /metrics` with the admin token, and at
//! `/shop/console` the merchant's console (the sales, creating and editing them, their
//! orders), on the API's admin routes. Static HTML, CSS and JavaScript, embedded at build
//! time: the pages hold no data, which the browser fetches with the token it is given.
//!
//! `api_origin` names where the API is (empty: this origin), as when a storefront serves
//! the page from its own domain and the API runs elsewhere; the browser then needs the
//! API's CORS permission (`allowed_origins`).

use spin_sdk::http::{Method, Request, Response, ResponseOutparam};
use spin_sdk::{http_component, variables};

// Each page and stylesheet is the shared part (`head.html`, `shop.css`) and its own,
// joined at build time: one file, one request, as before. A macro, as a const's
// `include_str!` wants literal paths.
macro_rules! joined {
    ($shared:literal, $own:literal) => {
        concat!(
            include_str!(concat!("../static/", $shared)),
            include_str!(concat!("../static/", $own))
        )
    };
}

const PAGE: &str = joined!("head.html", "sale.html");
const SCRIPT: &str = include_str!("../static/sale.js");
const STYLE: &str = joined!("shop.css", "sale.css");
const LIVE_PAGE: &str = joined!("head.html", "live.html");
const LIVE_SCRIPT: &str = include_str!("../static/live.js");
const LIVE_STYLE: &str = joined!("shop.css", "live.css");
const CONSOLE_PAGE: &str = joined!("head.html", "console.html");
const CONSOLE_SCRIPT: &str = include_str!("../static/console.js");
const CONSOLE_STYLE: &str = joined!("shop.css", "console.css");
/// The live view's and the console's shared script (`/metrics` read into series).
const METRICS_SCRIPT: &str = include_str!("../static/metrics.js");

/// Every answer leaves in one write (see `seckill-answer`).
#[http_component]
fn handle(request: Request, out: ResponseOutparam) {
    seckill_answer::send(out, answer(&request));
}

fn answer(request: &Request) -> Response {
    if *request.method() != Method::Get {
        return error(405, "method_not_allowed", "only GET is served here")
            .header("allow", "GET")
            .build();
    }
    match request.path() {
        "/shop" | "/shop/" => page(PAGE),
        "/shop/sale.js" => asset("text/javascript; charset=utf-8", SCRIPT),
        "/shop/sale.css" => asset("text/css; charset=utf-8", STYLE),
        "/shop/live" => page(LIVE_PAGE),
        "/shop/live.js" => asset("text/javascript; charset=utf-8", LIVE_SCRIPT),
        "/shop/live.css" => asset("text/css; charset=utf-8", LIVE_STYLE),
        "/shop/console" => page(CONSOLE_PAGE),
        "/shop/console.js" => asset("text/javascript; charset=utf-8", CONSOLE_SCRIPT),
        "/shop/console.css" => asset("text/css; charset=utf-8", CONSOLE_STYLE),
        "/shop/metrics.js" => asset("text/javascript; charset=utf-8", METRICS_SCRIPT),
        path => match path.strip_prefix("/shop/vouchers/") {
            Some(id) if is_voucher_id(id) => page(PAGE),
            _ => error(404, "not_found", "no such page").build(),
        },
    }
}

/// `template` with the API's origin filled in.
fn page(template: &str) -> Response {
    let api = match variables::get("api_origin") {
        Ok(api) => api.trim().trim_end_matches('/').to_string(),
        Err(e) => {
            eprintln!("api_origin: {e}");
            return error(503, "unavailable", "the page is not configured").build();
        }
    };
    let html = template.replace("{{API_ORIGIN}}", &escape(&api));
    Response::builder()
        .status(200)
        .header("content-type", "text/html; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("x-content-type-options", "nosniff")
        // Scripts and styles only from here; requests only here and to the API.
        .header(
            "content-security-policy",
            format!("default-src 'self'; connect-src 'self' {api}; frame-ancestors 'none'"),
        )
        .body(html)
        .build()
}

fn asset(content_type: &str, text: &'static str) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .header("x-content-type-options", "nosniff")
        .body(text)
        .build()
}

/// The API's error shape, so that a client reads both components' failures alike.
fn error(status: u16, code: &str, message: &str) -> spin_sdk::http::ResponseBuilder {
    let mut builder = Response::builder();
    builder
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .header("x-content-type-options", "nosniff")
        .body(format!(r#"{{"error":"{code}","message":"{message}"}}"#));
    builder
}

/// Canonical positive decimal, as the API takes it (the API checks the range).
fn is_voucher_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 19
        && !text.starts_with('0')
        && text.bytes().all(|b| b.is_ascii_digit())
}

/// For an HTML attribute value.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voucher_ids_are_canonical() {
        assert!(is_voucher_id("1"));
        assert!(is_voucher_id("9223372036854775807"));
        for bad in ["", "0", "01", "-1", "1a", "1/", "12345678901234567890"] {
            assert!(!is_voucher_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_api_origin_cannot_break_out_of_its_attribute() {
        assert_eq!(
            escape(r#"https://a.example"><script>"#),
            "https://a.example&quot;&gt;&lt;script&gt;"
        );
    }

    #[test]
    fn the_pages_have_their_placeholder_and_their_assets() {
        for (page, name) in [
            (PAGE, "sale"),
            (LIVE_PAGE, "live"),
            (CONSOLE_PAGE, "console"),
        ] {
            assert_eq!(page.matches("{{API_ORIGIN}}").count(), 1);
            assert!(page.contains(&format!(r#"src="/shop/{name}.js""#)));
            assert!(page.contains(&format!(r#"href="/shop/{name}.css""#)));
        }
    }

    #[test]
    fn the_pages_that_read_metrics_load_its_parser_before_their_own_script() {
        for (page, name) in [(LIVE_PAGE, "live"), (CONSOLE_PAGE, "console")] {
            let shared = page.find(r#"<script src="/shop/metrics.js" defer>"#);
            let own = page.find(&format!(r#"<script src="/shop/{name}.js" defer>"#));
            assert!(shared.is_some() && shared < own, "{name}");
        }
    }
}
